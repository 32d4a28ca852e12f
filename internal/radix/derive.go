package radix

import (
	"math/bits"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// derive returns the id of the set equal to set old with d applied to slot's
// entry, creating it if no interned set has that content, or false when a
// count would pass maxHolderCount. The caller takes the reference.
func (s *shard) derive(old, slot uint32, d tierDelta) (uint32, bool) {
	if s.sets[old].bits.bm != nil {
		if id, ok, done := s.deriveBits(old, slot, d); done {
			return id, ok
		}
	}
	// From and to entries. old's are copied before slot is looked for, in the
	// copy: the set is rarely in cache, and a copy streams its lines where a
	// binary search would wait for them one after another.
	os := &s.sets[old]
	n := int(os.bits.n)
	e := os.appendEntries(s.spare.get(n + 1)[:0]) // (room for an insert)
	e = e[:n+1]
	i := searchSlot(e[:n], slot)
	found := i < n && entrySlot(e[i]) == slot
	cur := uint64(slot) << 32
	if found {
		cur = e[i]
	}
	ne, ok := applyDelta(cur, d)
	if !ok || ne == cur {
		s.spare.put(e)
		return old, ok
	}
	keep := uint32(ne) != 0
	h := rehash(os.hash, cur, found, ne, keep)
	switch {
	case found && keep:
		e[i] = ne
		e = e[:n]
	case found:
		copy(e[i:], e[i+1:n])
		e = e[:n-1]
	default: // (!found: cur has no copies, so ne has some)
		copy(e[i+1:n+1], e[i:n])
		e[i] = ne
		e = e[:n+1]
	}
	if len(e) == 0 {
		s.spare.put(e)
		return emptySet, true
	}
	n = len(e)
	sb := makeBits(e, s.spare.get)
	if sb.bm != nil { // keep only the entries the bits do not tell
		ex := e[:0]
		for _, x := range e {
			if !plainEntry(x) {
				ex = append(ex, x)
			}
		}
		var own []uint64
		if len(ex) > 0 {
			own = s.spare.get(len(ex))
			copy(own, ex)
		}
		s.spare.put(e)
		e = own
	}
	return s.add(h, uint32(n), e, sb), true
}

// deriveBits is derive for a set old kept as bitmaps, when the new set is kept
// as bitmaps too (done is false otherwise, and nothing was done). It copies
// old's planes with slot's bit moved, and its entries not plain with slot's
// changed.
func (s *shard) deriveBits(old, slot uint32, d tierDelta) (id uint32, ok, done bool) {
	os := &s.sets[old]
	ob, oe := os.bits, os.e
	i := searchSlot(oe, slot)
	isEx := i < len(oe) && entrySlot(oe[i]) == slot
	cur := uint64(slot) << 32
	found := isEx
	if isEx {
		cur = oe[i]
	} else if t, in := ob.tierOf(slot); in {
		cur, found = cur|1<<(8*t), true
	}
	ne, ok := applyDelta(cur, d)
	if !ok || ne == cur {
		return old, ok, true
	}
	keep := uint32(ne) != 0
	n := os.bits.n
	if !found {
		n++
	} else if !keep {
		n--
	}
	x, bit := slot>>6, uint64(1)<<(slot&63)
	lo, hi, tiers := ob.lo, ob.lo+ob.w-1, ob.tiers
	if found { // drop cur's best tier if no other entry has it
		p := planeOf(ob.tiers, bestTier(cur), ob.w)
		others := false
		for r, v := range ob.bm[p : p+int32(ob.w)] {
			if ob.lo+uint32(r) == x {
				v &^= bit
			}
			if v != 0 {
				others = true
				break
			}
		}
		if !others {
			tiers &^= 1 << bestTier(cur)
		}
	}
	if keep {
		tiers |= 1 << bestTier(ne)
		lo, hi = min(lo, x), max(hi, x)
	} else if x == lo || x == hi { // the slot's word may be left empty
		empty := func(y uint32) bool {
			v := ob.word(y)
			if y == x {
				v &^= bit
			}
			return v == 0
		}
		for lo < hi && empty(lo) {
			lo++
		}
		for hi > lo && empty(hi) {
			hi--
		}
	}
	w := hi - lo + 1
	if !useBits(n, w, tiers) {
		return 0, false, false
	}
	sb := setBits{bm: s.spare.get(bits.OnesCount8(tiers) * int(w)), lo: lo, w: w, tiers: tiers}
	from, to := max(lo, ob.lo), min(lo+w, ob.lo+ob.w) // words both cover
	for t := range kv.NumTiers {
		np := planeOf(tiers, t, w)
		if np < 0 {
			continue
		}
		dst := sb.bm[np : np+int32(w)]
		op := planeOf(ob.tiers, t, ob.w)
		if op < 0 || from >= to {
			clear(dst)
			continue
		}
		clear(dst[:from-lo])
		copy(dst[from-lo:to-lo], ob.bm[op+int32(from-ob.lo):])
		clear(dst[to-lo:])
	}
	if found && x >= lo && x <= hi {
		if p := planeOf(tiers, bestTier(cur), w); p >= 0 {
			sb.bm[p+int32(x-lo)] &^= bit
		}
	}
	if keep {
		sb.bm[planeOf(tiers, bestTier(ne), w)+int32(x-lo)] |= bit
	}
	// The entries not plain: old's, with slot's replaced, dropped or added.
	addEx := keep && !plainEntry(ne)
	var ex []uint64
	if k := len(oe) + b2i(addEx) - b2i(isEx); k > 0 {
		ex = s.spare.get(k)
		switch {
		case isEx && addEx:
			copy(ex, oe)
			ex[i] = ne
		case isEx:
			copy(ex, oe[:i])
			copy(ex[i:], oe[i+1:])
		case addEx:
			copy(ex, oe[:i])
			ex[i] = ne
			copy(ex[i+1:], oe[i:])
		default:
			copy(ex, oe)
		}
	}
	return s.add(rehash(os.hash, cur, found, ne, keep), n, ex, sb), true, true
}

// rehash is the hash of a set whose hash is h after its entry cur (if found)
// becomes ne (if keep).
func rehash(h, cur uint64, found bool, ne uint64, keep bool) uint64 {
	if found {
		h -= mixEntry(cur)
	}
	if keep {
		h += mixEntry(ne)
	}
	return h
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
