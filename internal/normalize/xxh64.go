package normalize

import (
	"encoding/binary"
	"math/bits"
)

// XXH64's primes.
const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
)

// xxh64Stripes is XXH64 with seed of b, whose length is a positive multiple
// of 32: whole stripes and no tail, as the tokens of a block of 8, 16, 24...
// tokens are. It is xxhash.Digest's arithmetic without its buffering, seeding
// and length bookkeeping, which cost a prompt's hashing more than the
// arithmetic itself (TestXXH64Stripes checks it against the Digest).
func xxh64Stripes(seed uint64, b []byte) uint64 {
	n := uint64(len(b))
	v1 := seed + prime1
	v1 += prime2
	v2 := seed + prime2
	v3 := seed
	v4 := seed - prime1
	for ; len(b) >= 32; b = b[32:] {
		v1 = xxRound(v1, binary.LittleEndian.Uint64(b[0:8]))
		v2 = xxRound(v2, binary.LittleEndian.Uint64(b[8:16]))
		v3 = xxRound(v3, binary.LittleEndian.Uint64(b[16:24]))
		v4 = xxRound(v4, binary.LittleEndian.Uint64(b[24:32]))
	}
	h := bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
	h = xxMerge(h, v1)
	h = xxMerge(h, v2)
	h = xxMerge(h, v3)
	h = xxMerge(h, v4)
	h += n
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

func xxRound(acc, input uint64) uint64 {
	acc += input * prime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * prime1
}

func xxMerge(acc, val uint64) uint64 {
	acc ^= xxRound(0, val)
	return acc*prime1 + prime4
}
