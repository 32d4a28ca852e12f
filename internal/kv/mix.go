package kv

// Mix is MurmurHash3's 64-bit finalizer (fmix64): a bijection on uint64 that
// keeps 0 at 0 and spreads every input bit over the output. Unmix inverts it.
func Mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Unmix inverts Mix.
func Unmix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0x9cb4b2f8129337db // the inverse of Mix's second multiplier
	x ^= x >> 33
	x *= 0x4f74430c22a54005 // and of its first
	x ^= x >> 33
	return x
}
