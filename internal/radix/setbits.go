package radix

import (
	"math/bits"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// setBits is a holder set as bitmaps of worker slots, one plane per best tier
// its entries have, covering the 64-slot words lo..lo+w-1: Match intersects
// its active workers with a set a word at a time instead of entry by entry.
type setBits struct {
	bm    []uint64 // planes in tier order, w words each
	lo, w uint32
	tiers uint8 // the tiers that have a plane
	// n is the number of entries of the set (of either form): kept here,
	// in the padding after tiers, so that an hset is 80 bytes, not 88
	// (Match reads one at every holder-set change; see TestHsetSize).
	n uint32
}

// planeOf is where tier t's plane starts in bm, or -1 when no entry has t as
// its best tier.
func planeOf(tiers uint8, t kv.Tier, w uint32) int32 {
	if tiers&(1<<t) == 0 {
		return -1
	}
	return int32(bits.OnesCount8(tiers&(1<<t-1))) * int32(w)
}

// bitsMinEntries is the smallest set kept as bitmaps; bitsMaxRatio bounds their
// words per entry (sparse slots make wide bitmaps).
const (
	bitsMinEntries = 16
	bitsMaxRatio   = 2
)

// useBits reports whether a set of n entries whose slots span w words and
// whose best tiers are tiers is kept as bitmaps.
func useBits(n, w uint32, tiers uint8) bool {
	return n >= bitsMinEntries && uint32(bits.OnesCount8(tiers))*w <= bitsMaxRatio*n
}

// makeBits returns the bitmaps of a set with the sorted entries e, or none
// when the set is not kept as bitmaps. Their words come from alloc (contents
// arbitrary).
func makeBits(e []uint64, alloc func(n int) []uint64) setBits {
	if len(e) < bitsMinEntries {
		return setBits{}
	}
	lo, hi := entrySlot(e[0])>>6, entrySlot(e[len(e)-1])>>6
	w := hi - lo + 1
	var tiers uint8
	for _, x := range e {
		tiers |= 1 << bestTier(x)
	}
	if !useBits(uint32(len(e)), w, tiers) {
		return setBits{}
	}
	sb := setBits{bm: alloc(bits.OnesCount8(tiers) * int(w)), lo: lo, w: w, tiers: tiers}
	clear(sb.bm)
	for _, x := range e {
		s := entrySlot(x)
		sb.bm[uint32(planeOf(tiers, bestTier(x), w))+s>>6-lo] |= 1 << (s & 63)
	}
	return sb
}

// word is the union of b's planes at word x (x in lo..lo+w-1).
func (b *setBits) word(x uint32) uint64 {
	var all uint64
	for i := range uint32(bits.OnesCount8(b.tiers)) {
		all |= b.bm[i*b.w+x-b.lo]
	}
	return all
}

// tierOf is the tier of the plane holding slot's bit, or false.
func (b *setBits) tierOf(slot uint32) (kv.Tier, bool) {
	r := slot>>6 - b.lo
	if r >= b.w { // (slots below lo wrap past w)
		return 0, false
	}
	for t := range kv.NumTiers {
		if p := planeOf(b.tiers, t, b.w); p >= 0 && b.bm[p+int32(r)]&(1<<(slot&63)) != 0 {
			return t, true
		}
	}
	return 0, false
}
