package radix

import (
	"math/bits"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// hset is an immutable set of holder entries (see entrySlot), shared by every
// node whose holders are exactly these. It is kept in one of two forms, which
// depends only on its content (see useBits), so that two sets are equal iff
// their forms are:
//   - as bitmaps, when it has bitsMinEntries entries or more over dense enough
//     slots: a bit per entry in the plane of its best tier (see setBits), and
//     in e only the entries the bits do not tell (not plainEntry);
//   - else as its entries, sorted, in e.
//
// Match reads only the bitmaps of a set that has them. A change of one entry
// (derive) copies the bitmaps, a few words per 64 workers, instead of an entry
// per worker: a popular prefix's set has a thousand entries and changes with
// every store and evict of it.
type hset struct {
	e        []uint64
	bits     setBits
	hash     uint64 // sum of mixEntry over the entries
	refs     uint32 // nodes pointing here
	interned bool   // intern[hash] == this set
}

// Set ids: a node no worker holds points to emptySet, which every shard has
// and which is never interned; noSet is no set's id.
const (
	emptySet = 0
	noSet    = ^uint32(0)
)

// appendEntries appends the entries of hs to dst, sorted.
func (hs *hset) appendEntries(dst []uint64) []uint64 {
	b := &hs.bits
	if b.bm == nil {
		return append(dst, hs.e...)
	}
	ex := hs.e
	for x := b.lo; x < b.lo+b.w; x++ {
		for all := b.word(x); all != 0; all &= all - 1 {
			slot := x<<6 | uint32(bits.TrailingZeros64(all))
			if len(ex) > 0 && entrySlot(ex[0]) == slot {
				dst = append(dst, ex[0])
				ex = ex[1:]
				continue
			}
			t, _ := b.tierOf(slot)
			dst = append(dst, uint64(slot)<<32|1<<(8*t))
		}
	}
	return dst
}

// setMemo caches the last holder-set transition of one operation: for one
// worker slot and one delta, old set -> new set. Runs along a shared prefix
// hit it at every node after the first.
type setMemo struct {
	ok       bool
	old, new uint32
	d        tierDelta
}

// adjust applies d to slot's holder entry on node id, moving the node to the
// interned set that results, and frees the node if nobody holds it any more.
// It reports false, changing nothing, when a count would pass maxHolderCount
// (only a positive d can).
func (s *shard) adjust(id, slot uint32, d tierDelta, memo *setMemo) bool {
	m := s.meta(id)
	old := m.set
	var nw uint32
	if memo.ok && memo.old == old && memo.d == d && (memo.new == emptySet || s.sets[memo.new].refs > 0) {
		nw = memo.new
	} else {
		var ok bool
		if nw, ok = s.derive(old, slot, d); !ok {
			return false
		}
		*memo = setMemo{ok: true, old: old, new: nw, d: d}
	}
	if nw == old {
		return true
	}
	if nw != emptySet {
		s.sets[nw].refs++
	}
	m.set = nw
	if old != emptySet {
		hs := &s.sets[old]
		hs.refs--
		if hs.refs == 0 {
			if hs.interned {
				s.intern.del(hs.hash)
			}
			s.spare.put(hs.e)
			s.spare.put(hs.bits.bm)
			*hs = hset{}
			s.freeSets = append(s.freeSets, old)
			if memo.new == old {
				memo.ok = false
			}
		}
	}
	if nw == emptySet {
		s.release(id)
	}
	return true
}

// add returns the id of the interned set with the given content (hash h, n
// entries, stored form e and sb), handing e and sb's words back to the pool,
// or else of a new set made of them.
func (s *shard) add(h uint64, n uint32, e []uint64, sb setBits) uint32 {
	v, exists := s.intern.get(h)
	if iid := uint32(v); exists {
		if is := &s.sets[iid]; is.bits.n == n && equalEntries(is.e, e) && is.bits.lo == sb.lo && is.bits.w == sb.w &&
			is.bits.tiers == sb.tiers && equalEntries(is.bits.bm, sb.bm) {
			s.spare.put(e)
			s.spare.put(sb.bm)
			return iid
		}
	}
	var id uint32
	if k := len(s.freeSets); k > 0 {
		id = s.freeSets[k-1]
		s.freeSets = s.freeSets[:k-1]
	} else {
		id = uint32(len(s.sets))
		s.sets = append(s.sets, hset{})
	}
	sb.n = n
	s.sets[id] = hset{e: e, bits: sb, hash: h, interned: !exists}
	if !exists {
		s.intern.set(h, uint64(id))
	}
	return id
}

func equalEntries(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func mixEntry(e uint64) uint64 { return kv.Mix(e ^ 0x5bd1e9955bd1e995) }
