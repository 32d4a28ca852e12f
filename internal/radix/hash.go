package radix

// fmix64 is MurmurHash3's finalizer, a bijection on uint64.
func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// unfmix64 inverts fmix64.
func unfmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0x9cb4b2f8129337db // the inverse of fmix64's second multiplier
	x ^= x >> 33
	x *= 0x4f74430c22a54005 // and of its first
	x ^= x >> 33
	return x
}
