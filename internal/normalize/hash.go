package normalize

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// The router block hash. See docs/block-hash.md for the byte-level specification and
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
	if littleEndian && len(mm) == 0 && len(tokens) > 0 && len(tokens)%8 == 0 {
		// Whole stripes (a 16-token block is two): XXH64 without the Digest.
		return xxh64Stripes(seed, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(tokens))), 4*len(tokens)))
	}
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
// A blockSize below 1 hashes nothing. It is PromptHasher.Hash with working
// memory of its own; a caller that hashes many prompts keeps a PromptHasher.
func HashPrompt(seed uint64, tokens []uint32, blockSize int, mm []MMItem, out []uint64) []uint64 {
	var h PromptHasher
	return h.Hash(seed, tokens, blockSize, mm, out)
}

// PromptHasher hashes prompts as HashPrompt does, keeping its working memory
// from one call to the next. The zero value is ready to use; a PromptHasher
// is not safe for concurrent use.
//
// Its work is linear in the prompt: the items are put in offset order once
// (no work when they are listed in prompt order, as clients list them), then
// one pass over the blocks moves a cursor over them, keeping the items that
// overlap the current block. Each item is admitted once, and each block looks
// only at the items that overlap it (which it must hash), plus those that
// ended in the previous block. For items listed in prompt order that do not
// overlap one another, that is at most blocks + 4*items item visits, where
// scanning every item for every block was blocks*items (TestPromptHasherWork
// counts them). Items listed out of order add their sort and, when admitted,
// a shift past the items already active (for items that do not overlap, at
// most those of two blocks). Items that overlap one another cost what the
// hash input costs: a block mixes in every item that overlaps it.
type PromptHasher struct {
	order  []int    // items with a length, by offset (stable: list order among equal offsets)
	active []int    // the items overlapping the current block, in list order
	hs     []uint64 // the current block's item hashes
	visits int      // item visits of the last Hash: its work beyond the tokens (tests read it)
}

// Hash appends the router block hashes of a prompt to out, as HashPrompt.
func (h *PromptHasher) Hash(seed uint64, tokens []uint32, blockSize int, mm []MMItem, out []uint64) []uint64 {
	h.visits = 0
	if blockSize < 1 {
		return out
	}
	hashedEnd := uint64(len(tokens) / blockSize * blockSize) // tokens past it are in no hashed block
	// The items that can overlap a hashed block, by offset.
	h.order = h.order[:0]
	inOrder := true
	for i := range mm {
		h.visits++
		it := &mm[i]
		if it.Length == 0 || uint64(it.Offset) >= hashedEnd {
			continue
		}
		if n := len(h.order); n > 0 && it.Offset < mm[h.order[n-1]].Offset {
			inOrder = false
		}
		h.order = append(h.order, i)
	}
	if !inOrder {
		slices.SortStableFunc(h.order, func(a, b int) int { return cmp.Compare(mm[a].Offset, mm[b].Offset) })
	}
	h.active = h.active[:0]
	next := 0 // the cursor: h.order[next:] begin at or past the current block's end
	for start := 0; start+blockSize <= len(tokens); start += blockSize {
		end := uint64(start + blockSize)
		// Admit the items that begin in this block (they overlap it: each
		// has a length), each at its place in list order.
		for ; next < len(h.order) && uint64(mm[h.order[next]].Offset) < end; next++ {
			h.visits++
			i := h.order[next]
			j := len(h.active)
			h.active = append(h.active, i)
			for ; j > 0 && h.active[j-1] > i; j-- {
				h.visits++
				h.active[j] = h.active[j-1]
			}
			h.active[j] = i
		}
		if len(h.active) == 0 {
			out = append(out, BlockHash(seed, tokens[start:end], nil))
			continue
		}
		// Drop the items that ended before this block; mix in the rest.
		hs, kept := h.hs[:0], h.active[:0]
		for _, i := range h.active {
			h.visits++
			if uint64(mm[i].Offset)+uint64(mm[i].Length) > uint64(start) {
				kept = append(kept, i)
				hs = append(hs, mm[i].Hash)
			}
		}
		h.active, h.hs = kept, hs
		out = append(out, BlockHash(seed, tokens[start:end], hs))
	}
	return out
}
