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
	from := &s.sets[old]
	n := int(from.bits.n)
	e := from.appendEntries(s.spare.get(n + 1)[:0]) // (room for an insert)
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
	h := rehash(from.hash, cur, found, ne, keep)
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
	from := &s.sets[old]
	ob, oe := from.bits, from.e
	i := searchSlot(oe, slot)
	isEx := i < len(oe) && entrySlot(oe[i]) == slot
	c := entryChange{slot: slot, cur: uint64(slot) << 32, found: isEx}
	if isEx {
		c.cur = oe[i]
	} else if t, in := ob.tierOf(slot); in {
		c.cur, c.found = c.cur|1<<(8*t), true
	}
	c.ne, ok = applyDelta(c.cur, d)
	if !ok || c.ne == c.cur {
		return old, ok, true
	}
	c.keep = uint32(c.ne) != 0
	n := ob.n
	if !c.found {
		n++
	} else if !c.keep {
		n--
	}
	lo, hi, tiers := ob.shapeAfter(c)
	w := hi - lo + 1
	if !useBits(n, w, tiers) {
		return 0, false, false
	}
	sb := s.movedBits(&ob, c, lo, w, tiers)
	ex := s.changedEx(oe, i, isEx, c.ne, c.keep && !plainEntry(c.ne))
	return s.add(rehash(from.hash, c.cur, c.found, c.ne, c.keep), n, ex, sb), true, true
}

// entryChange is a change of one holder entry of a set: slot's entry cur
// (found: the set has one) becomes ne (keep: ne has copies, so stays).
type entryChange struct {
	slot        uint32
	cur, ne     uint64
	found, keep bool
}

// shapeAfter returns the words lo..hi and the tiers of the bitmaps of b's set
// after change c.
func (b *setBits) shapeAfter(c entryChange) (lo, hi uint32, tiers uint8) {
	x, bit := c.slot>>6, uint64(1)<<(c.slot&63)
	lo, hi, tiers = b.lo, b.lo+b.w-1, b.tiers
	if c.found && !b.othersOnTier(bestTier(c.cur), x, bit) {
		tiers &^= 1 << bestTier(c.cur)
	}
	if c.keep {
		tiers |= 1 << bestTier(c.ne)
		return min(lo, x), max(hi, x), tiers
	}
	if x == lo || x == hi { // the slot's word may be left empty
		for lo < hi && b.emptyWithout(lo, x, bit) {
			lo++
		}
		for hi > lo && b.emptyWithout(hi, x, bit) {
			hi--
		}
	}
	return lo, hi, tiers
}

// othersOnTier reports whether tier t's plane (which b has) holds a bit other
// than bit of word x.
func (b *setBits) othersOnTier(t kv.Tier, x uint32, bit uint64) bool {
	p := planeOf(b.tiers, t, b.w)
	for r, v := range b.bm[p : p+int32(b.w)] {
		if b.lo+uint32(r) == x {
			v &^= bit
		}
		if v != 0 {
			return true
		}
	}
	return false
}

// emptyWithout reports whether b's planes have no bit in word y other than
// bit of word x.
func (b *setBits) emptyWithout(y, x uint32, bit uint64) bool {
	v := b.word(y)
	if y == x {
		v &^= bit
	}
	return v == 0
}

// movedBits returns the bitmaps over the words lo..lo+w-1 with tiers (see
// shapeAfter) of ob's set after change c: ob's planes copied, with c's slot's
// bit moved. Their words come from the spare pool.
func (s *shard) movedBits(ob *setBits, c entryChange, lo, w uint32, tiers uint8) setBits {
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
	x, bit := c.slot>>6, uint64(1)<<(c.slot&63)
	if c.found && x >= lo && x <= lo+w-1 {
		if p := planeOf(tiers, bestTier(c.cur), w); p >= 0 {
			sb.bm[p+int32(x-lo)] &^= bit
		}
	}
	if c.keep {
		sb.bm[planeOf(tiers, bestTier(c.ne), w)+int32(x-lo)] |= bit
	}
	return sb
}

// changedEx returns the entries not plain of a set kept as bitmaps, whose
// old ones are oe, after slot's entry (oe[i] if isEx) becomes ne (one of them
// if addEx): old's, with slot's replaced, dropped or added, in an array from
// the spare pool (nil when there are none).
func (s *shard) changedEx(oe []uint64, i int, isEx bool, ne uint64, addEx bool) []uint64 {
	k := len(oe) + b2i(addEx) - b2i(isEx)
	if k == 0 {
		return nil
	}
	ex := s.spare.get(k)
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
	return ex
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
