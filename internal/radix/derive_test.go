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
	kinds := map[string]int{}
	for iter := range 20000 {
		c := randDeriveCase(r)
		s := newShard(0)
		oid := internAs(s, c.old)
		s.sets[oid].refs = 1
		got, ok := s.derive(oid, c.slot, c.d)
		if !ok {
			t.Fatalf("iter %d: derive refused", iter)
		}
		fresh := newShard(0)
		want := uint32(emptySet)
		if len(c.want) > 0 {
			want = internAs(fresh, c.want)
		}
		g, w := &s.sets[got], &fresh.sets[want]
		if all := g.appendEntries(nil); !slices.Equal(all, c.want) || g.bits.n != w.bits.n || g.hash != w.hash || !slices.Equal(g.e, w.e) ||
			!slices.Equal(g.bits.bm, w.bits.bm) || g.bits.lo != w.bits.lo || g.bits.w != w.bits.w || g.bits.tiers != w.bits.tiers {
			t.Fatalf("iter %d: slot %d found %v keep %v: got %x %+v, want %x %+v (entries %x)", iter, c.slot, c.found, c.keep, g.e, g.bits, w.e, w.bits, c.want)
		}
		kinds[deriveKind(c, &s.sets[oid], g)]++
	}
	for _, k := range []string{"entries", "to bitmaps", "from bitmaps", "planes changed", "range changed", "others changed", "bit moved"} {
		if kinds[k] < 10 {
			t.Errorf("only %d changes of kind %q (%v)", kinds[k], k, kinds)
		}
	}
	t.Log(kinds)
}

// deriveCase is a change of one entry of a holder set: slot's entry cur
// (found: the set has one) becomes ne (keep: ne has copies), by d.
type deriveCase struct {
	old, want   []uint64 // the set's entries before and after
	slot        uint32
	cur, ne     uint64
	found, keep bool
	d           tierDelta
}

// randDeriveCase draws a set and a change of one of its slots, existing or
// new (maybe below or above all).
func randDeriveCase(r *rand.Rand) deriveCase {
	n := 1 + r.IntN(60)
	gap := []int{1, 2, 3, 4, 20, 48}[r.IntN(6)] // wide gaps make sets too sparse for bitmaps
	base := uint32(r.IntN(300))
	var c deriveCase
	for i := range n {
		c.old = append(c.old, uint64(base+uint32(i*gap+r.IntN(gap)))<<32|randCounts(r))
	}
	c.old = slices.CompactFunc(c.old, func(a, b uint64) bool { return entrySlot(a) == entrySlot(b) })
	if r.IntN(2) == 0 {
		c.slot = entrySlot(c.old[r.IntN(len(c.old))])
	} else {
		c.slot = uint32(r.IntN(int(entrySlot(c.old[len(c.old)-1])) + 200))
	}
	i, found := slices.BinarySearchFunc(c.old, c.slot, func(e uint64, s uint32) int { return cmp.Compare(entrySlot(e), s) })
	c.found = found
	if found {
		c.cur = c.old[i]
	}
	c.keep = !found || r.IntN(3) > 0
	if c.keep {
		c.ne = uint64(c.slot)<<32 | randCounts(r)
	}
	for tr := range kv.NumTiers {
		c.d[tr] = int8(entryCount(c.ne, tr)) - int8(entryCount(c.cur, tr))
	}
	c.want = slices.Clone(c.old)
	switch {
	case found && c.keep:
		c.want[i] = c.ne
	case found:
		c.want = slices.Delete(c.want, i, i+1)
	default:
		c.want = slices.Insert(c.want, i, c.ne)
	}
	return c
}

// randCounts draws an entry's per-tier counts: one device copy most often.
func randCounts(r *rand.Rand) uint64 {
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

// internAs interns the entries e in s as derive would have made their set.
func internAs(s *shard, e []uint64) uint32 {
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

// deriveKind names the kind of change c made of set old into got, so that
// the test can check that every kind was exercised.
func deriveKind(c deriveCase, old, got *hset) string {
	ob := old.bits
	switch {
	case c.ne == c.cur:
		return "unchanged"
	case ob.bm == nil && got.bits.bm != nil:
		return "to bitmaps"
	case ob.bm == nil:
		return "entries"
	case got.bits.bm == nil:
		return "from bitmaps"
	case got.bits.tiers != ob.tiers:
		return "planes changed"
	case got.bits.lo != ob.lo || got.bits.w != ob.w:
		return "range changed"
	case !slices.Equal(got.e, old.e):
		return "others changed"
	}
	return "bit moved"
}
