package radix

import "github.com/kvrouter/kvrouter/internal/kv"

// A holder entry packs a worker slot (high 32 bits) and, per tier t, the number
// of the worker's engine hashes bound to the node that have a copy on t (8 bits
// at bit 8t, saturating). Sorting entries sorts them by slot.
func entrySlot(e uint64) uint32 { return uint32(e >> 32) }

func entryCount(e uint64, t kv.Tier) uint32 { return uint32(e>>(8*t)) & 0xff }

// bestTier is the best tier the entry holds a copy on. e must hold one.
func bestTier(e uint64) kv.Tier {
	c := uint32(e)
	var t kv.Tier
	for c&0xff == 0 {
		c >>= 8
		t++
	}
	return t
}

// tierDelta is a per-tier change of holder counts, packed as one int8 per tier.
type tierDelta [kv.NumTiers]int8

// maxHolderCount is the most engine hashes of one worker/rank a node counts
// per tier (8 bits of a holder entry).
const maxHolderCount = 0xff

// applyDelta applies d to entry e. It reports false, and changes nothing, when
// a count would pass maxHolderCount: a count that saturated would no longer
// match the bindings, and removing them would free a node still bound.
func applyDelta(e uint64, d tierDelta) (uint64, bool) {
	out := e &^ 0xffffffff
	for t := kv.Tier(0); t < kv.NumTiers; t++ {
		c := int(entryCount(e, t)) + int(d[t])
		if c < 0 {
			c = 0
		} else if c > maxHolderCount {
			return e, false
		}
		out |= uint64(c) << (8 * t)
	}
	return out, true
}

// plainEntry reports whether holder entry e is one copy on one tier: in a set
// kept as bitmaps, its bit says all there is to say about it.
func plainEntry(e uint64) bool {
	c := uint32(e)
	return c&(c-1) == 0 && c&0x01010101 != 0
}

// searchSlot is the index of the first of the sorted entries e whose slot is
// slot or above.
func searchSlot(e []uint64, slot uint32) int {
	i, j := 0, len(e)
	for i < j {
		m := int(uint(i+j) >> 1)
		if entrySlot(e[m]) < slot {
			i = m + 1
		} else {
			j = m
		}
	}
	return i
}

// tierOne is the delta of v copies on tier t.
func tierOne(t kv.Tier, v int8) tierDelta {
	var d tierDelta
	d[t] = v
	return d
}
