package radix

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestDerive changes one entry of random holder sets (added, dropped, or
// moved between tiers and counts, with tiers held by few entries so that
// planes come and go, and sets around the size and density where bitmaps
// start) and checks that derive gives exactly the set that its entries, built
// from scratch, make: the same entries, form and bitmaps.
func TestDerive(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	counts := func() uint64 { // per-tier counts, one device copy most often
		if r.IntN(3) > 0 {
			return 1
		}
		var c uint64
		for c == 0 {
			for tr := range kv.NumTiers {
				if r.IntN(4) == 0 || (tr == kv.TierDevice && r.IntN(2) == 0) {
					c |= uint64(1+r.IntN(3)) << (8 * tr)
				}
			}
		}
		return c
	}
	// setOf interns e in s as derive would have made it.
	setOf := func(s *shard, e []uint64) uint32 {
		var h uint64
		for _, x := range e {
			h += mixEntry(x)
		}
		sb := makeBits(e, s.spare.get)
		kept := slices.Clone(e)
		if sb.bm != nil {
			kept = slices.DeleteFunc(kept, plainEntry)
			if len(kept) == 0 {
				kept = nil
			}
		}
		return s.add(h, uint32(len(e)), kept, sb)
	}
	kinds := map[string]int{}
	for iter := range 20000 {
		n := 1 + r.IntN(60)
		gap := []int{1, 2, 3, 4, 20, 48}[r.IntN(6)] // wide gaps make sets too sparse for bitmaps
		base := uint32(r.IntN(300))
		var old []uint64
		for i := range n {
			old = append(old, uint64(base+uint32(i*gap+r.IntN(gap)))<<32|counts())
		}
		old = slices.CompactFunc(old, func(a, b uint64) bool { return entrySlot(a) == entrySlot(b) })
		// The changed slot: an existing one or a new one (maybe below or above all).
		var slot uint32
		if r.IntN(2) == 0 {
			slot = entrySlot(old[r.IntN(len(old))])
		} else {
			slot = uint32(r.IntN(int(entrySlot(old[len(old)-1])) + 200))
		}
		i, found := slices.BinarySearchFunc(old, slot, func(e uint64, s uint32) int { return cmp.Compare(entrySlot(e), s) })
		var cur uint64
		if found {
			cur = old[i]
		}
		keep := !found || r.IntN(3) > 0
		var ne uint64
		if keep {
			ne = uint64(slot)<<32 | counts()
		}
		var d tierDelta
		for tr := range kv.NumTiers {
			d[tr] = int8(entryCount(ne, tr)) - int8(entryCount(cur, tr))
		}
		e := slices.Clone(old)
		switch {
		case found && keep:
			e[i] = ne
		case found:
			e = slices.Delete(e, i, i+1)
		default:
			e = slices.Insert(e, i, ne)
		}

		s := newShard()
		oid := setOf(s, old)
		s.sets[oid].refs = 1
		got, ok := s.derive(oid, slot, d)
		if !ok {
			t.Fatalf("iter %d: derive refused", iter)
		}
		fresh := newShard()
		want := uint32(emptySet)
		if len(e) > 0 {
			want = setOf(fresh, e)
		}
		g, w := &s.sets[got], &fresh.sets[want]
		if all := g.appendEntries(nil); !slices.Equal(all, e) || g.bits.n != w.bits.n || g.hash != w.hash || !slices.Equal(g.e, w.e) ||
			!slices.Equal(g.bits.bm, w.bits.bm) || g.bits.lo != w.bits.lo || g.bits.w != w.bits.w || g.bits.tiers != w.bits.tiers {
			t.Fatalf("iter %d: slot %d found %v keep %v: got %x %+v, want %x %+v (entries %x)", iter, slot, found, keep, g.e, g.bits, w.e, w.bits, e)
		}
		ob := s.sets[oid].bits
		switch {
		case ne == cur:
			kinds["unchanged"]++
		case ob.bm == nil && g.bits.bm != nil:
			kinds["to bitmaps"]++
		case ob.bm == nil:
			kinds["entries"]++
		case g.bits.bm == nil:
			kinds["from bitmaps"]++
		case g.bits.tiers != ob.tiers:
			kinds["planes changed"]++
		case g.bits.lo != ob.lo || g.bits.w != ob.w:
			kinds["range changed"]++
		case !slices.Equal(g.e, s.sets[oid].e):
			kinds["others changed"]++
		default:
			kinds["bit moved"]++
		}
	}
	for _, k := range []string{"entries", "to bitmaps", "from bitmaps", "planes changed", "range changed", "others changed", "bit moved"} {
		if kinds[k] < 10 {
			t.Errorf("only %d changes of kind %q (%v)", kinds[k], k, kinds)
		}
	}
	t.Log(kinds)
}
