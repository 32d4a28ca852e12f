package radix

import "testing"

// TestPathKeyCollision forces two live nodes with one path key (under
// different parents), which real hashes produce about never, and checks
// lookup, release and the promotion of the overflow entry.
func TestPathKeyCollision(t *testing.T) {
	s := newShard()
	var memo setMemo
	hold := func(id uint32, d int8) { s.adjust(id, 7, tierOne(TierDevice, d), &memo) }
	a := s.child(rootID, 111)
	b := s.child(rootID, 222)
	hold(a, 1)
	hold(b, 1)
	const k = 999
	ca := s.child(a, k)
	hold(ca, 1)
	cb := s.child(b, k) // same key, other parent: goes to the overflow map
	hold(cb, 1)
	if ca == cb || len(s.over) != 1 {
		t.Fatalf("collision not kept apart: %d %d over=%v", ca, cb, s.over)
	}
	for _, c := range []struct{ parent, want uint32 }{{a, ca}, {b, cb}} {
		if got, ok := s.lookup(c.parent, k); !ok || got != c.want {
			t.Fatalf("lookup(%d, k) = %d, %v; want %d", c.parent, got, ok, c.want)
		}
	}
	if _, ok := s.lookup(rootID, k); ok {
		t.Fatal("found a key under the wrong parent")
	}
	// Freeing the node in the main table promotes the overflow one.
	hold(ca, -1)
	if len(s.over) != 0 {
		t.Fatalf("overflow not promoted: %v", s.over)
	}
	if got, ok := s.lookup(b, k); !ok || got != cb {
		t.Fatalf("after promotion lookup = %d, %v", got, ok)
	}
	if _, ok := s.lookup(a, k); ok {
		t.Fatal("freed node still found")
	}
	// And the other way round: free the overflow node while the main one lives.
	ca = s.child(a, k)
	hold(ca, 1)
	hold(ca, -1) // ca was the overflow entry this time
	if got, ok := s.lookup(b, k); !ok || got != cb || len(s.over) != 0 {
		t.Fatalf("lookup = %d, %v, over %v", got, ok, s.over)
	}
	for _, id := range []uint32{cb, a, b} {
		hold(id, -1)
	}
	if s.live != 0 || s.kids.len() != 0 || len(s.chunks) != 0 {
		t.Fatalf("shard not empty: live %d keys %d chunks %d", s.live, s.kids.len(), len(s.chunks))
	}
}
