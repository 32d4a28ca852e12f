package normalize

import (
	"encoding/binary"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// The router block hash. See the README's "Router block hash" section for the byte-level specification and
// testdata/hash_vectors.json for test vectors.

// Seed returns the block-hash seed for a LoRA adapter name and a cache
// namespace (cache salt); empty strings mean "no adapter" and "no namespace".
// It is XXH64 (seed 0) of the 16 bytes XXH64(loraName) || XXH64(cacheNamespace),
// each inner hash with seed 0 and written as a little-endian uint64. A
// namespace with Dynamo's "dynamo-cache-salt:" prefix is hashed without it, as
// the normalizer does for engine events.
func Seed(loraName, cacheNamespace string) uint64 {
	cacheNamespace = strings.TrimPrefix(cacheNamespace, dynamoSaltPrefix)
	return seedFromHashes(xxhash.Sum64String(loraName), xxhash.Sum64String(cacheNamespace))
}

// seedFromHashes is Seed given the XXH64 hashes of the LoRA name and namespace.
func seedFromHashes(loraHash, nsHash uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], loraHash)
	binary.LittleEndian.PutUint64(b[8:], nsHash)
	return xxhash.Sum64(b[:])
}

// seedCache remembers the seed of the last store: consecutive stores of a
// worker mostly share their LoRA adapter and namespace.
type seedCache struct {
	emptyHash        uint64 // XXH64(""): the hash of no LoRA name and of no namespace
	loraHash, nsHash uint64
	last             uint64
}

func newSeedCache() seedCache {
	e := xxhash.Sum64(nil)
	return seedCache{emptyHash: e, loraHash: e, nsHash: e, last: seedFromHashes(e, e)}
}

// seed returns the seed of a LoRA name (empty for none) and a namespace.
func (c *seedCache) seed(loraName []byte, ns blockNS) uint64 {
	loraHash, nsHash := c.emptyHash, c.emptyHash
	if len(loraName) > 0 {
		loraHash = xxhash.Sum64(loraName)
	}
	if ns.ok {
		nsHash = ns.hash
	}
	if loraHash != c.loraHash || nsHash != c.nsHash {
		c.loraHash, c.nsHash = loraHash, nsHash
		c.last = seedFromHashes(loraHash, nsHash)
	}
	return c.last
}

// BlockHash returns the router hash of one block: XXH64 with the given seed
// over the block's tokens, each a little-endian uint32, followed by the
// multimodal item hashes that overlap the block, each a little-endian uint64.
// It is not chained: a block's position comes from its path in the index.
// It does not allocate.
func BlockHash(seed uint64, tokens []uint32, mm []uint64) uint64 {
	var d xxhash.Digest
	d.ResetWithSeed(seed)
	if littleEndian {
		// The in-memory representation is the wire representation.
		if len(tokens) > 0 {
			d.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(tokens))), 4*len(tokens)))
		}
		if len(mm) > 0 {
			d.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(mm))), 8*len(mm)))
		}
		return d.Sum64()
	}
	var buf [256]byte
	n := 0
	for _, t := range tokens {
		if n+4 > len(buf) {
			d.Write(buf[:n])
			n = 0
		}
		binary.LittleEndian.PutUint32(buf[n:], t)
		n += 4
	}
	for _, h := range mm {
		if n+8 > len(buf) {
			d.Write(buf[:n])
			n = 0
		}
		binary.LittleEndian.PutUint64(buf[n:], h)
		n += 8
	}
	d.Write(buf[:n])
	return d.Sum64()
}

// littleEndian reports whether the machine stores integers little-endian.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// MMItem is a prompt-side multimodal item covering tokens [Offset, Offset+Length).
type MMItem struct {
	Hash           uint64
	Offset, Length uint32
}

// MMHash returns the hash of a multimodal item identifier: for 64 hex digits,
// the first 16 hex digits read as a big-endian uint64; otherwise XXH64 (seed 0)
// of the identifier's bytes.
func MMHash(id string) uint64 {
	if h, ok := hexMMHash(id); ok {
		return h
	}
	return xxhash.Sum64String(id)
}

// mmHashBytes is MMHash for an identifier held as bytes.
func mmHashBytes(id []byte) uint64 {
	if h, ok := hexMMHash(id); ok {
		return h
	}
	return xxhash.Sum64(id)
}

// hexMMHash reports whether id is exactly 64 hex digits and, if so, returns
// its first 16 digits as a uint64.
func hexMMHash[S string | []byte](id S) (uint64, bool) {
	if len(id) != 64 {
		return 0, false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return 0, false
		}
	}
	h, err := strconv.ParseUint(string(id[:16]), 16, 64)
	return h, err == nil
}

// HashPrompt appends to out one BlockHash per full block of blockSize tokens
// (a partial tail block is not hashed). Block i mixes in, in the order of mm,
// the hashes of the items whose token range overlaps [i*blockSize, (i+1)*blockSize).
// A blockSize below 1 hashes nothing.
func HashPrompt(seed uint64, tokens []uint32, blockSize int, mm []MMItem, out []uint64) []uint64 {
	if blockSize < 1 {
		return out
	}
	var scratch [16]uint64
	for start := 0; start+blockSize <= len(tokens); start += blockSize {
		hs := scratch[:0]
		end := uint64(start + blockSize)
		for _, it := range mm {
			if it.Length == 0 {
				continue
			}
			if uint64(it.Offset) < end && uint64(it.Offset)+uint64(it.Length) > uint64(start) {
				hs = append(hs, it.Hash)
			}
		}
		out = append(out, BlockHash(seed, tokens[start:end], hs))
	}
	return out
}
