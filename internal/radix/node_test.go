package radix

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestPathKeyCollision forces two live nodes with one path key (under
// different parents), which real hashes produce about never, and checks
// lookup, release and the promotion of the overflow entry.
func TestPathKeyCollision(t *testing.T) {
	s := newShard(0)
	var memo setMemo
	hold := func(id uint32, d int8) { s.adjust(id, 7, tierOne(kv.TierDevice, d), &memo) }
	a := s.child(rootID, 111, 0)
	b := s.child(rootID, 222, 0)
	hold(a, 1)
	hold(b, 1)
	const k = 999
	ca := s.child(a, k, 1)
	hold(ca, 1)
	cb := s.child(b, k, 1) // same key, other parent: goes to the overflow map
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
	ca = s.child(a, k, 1)
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

// TestRunIDsAfterInterleavedFrees frees chains level by level across chains,
// so that the free list holds their nodes interleaved (as when an engine
// evicts several requests' blocks at once), then stores new chains and checks
// that each still gets consecutive node ids, which Match follows without
// probing the child map.
func TestRunIDsAfterInterleavedFrees(t *testing.T) {
	const chains, depth = 8, 24
	ix := New(Config{SegmentBlocks: depth}) // (each chain one segment)
	w := kv.WorkerRank{ID: "w"}
	var firsts []uint64 // first blocks in one shard, so the chains share a free list
	for h := uint64(1); len(firsts) < 2*chains+1; h++ {
		if ix.rootShard(h) == ix.rootShard(1) {
			firsts = append(firsts, h)
		}
	}
	eh := func(c, i int) uint64 { return uint64(c)<<16 | uint64(i) + 1 }
	store := func(c int) {
		blocks := make([]kv.Block, depth)
		for i := range blocks {
			blocks[i] = kv.Block{EngineHash: eh(c, i), BlockHash: uint64(c)<<20 | uint64(i)}
		}
		blocks[0].BlockHash = firsts[c]
		if err := ix.Store(w, 0, false, kv.TierDevice, blocks); err != nil {
			t.Fatal(err)
		}
	}
	store(2 * chains) // stays, so that the shard is never empty (and reset)
	for c := range chains {
		store(c)
	}
	for i := depth - 1; i >= 0; i-- {
		for c := range chains {
			if err := ix.Remove(w, []uint64{eh(c, i)}, kv.TierDevice); err != nil {
				t.Fatal(err)
			}
		}
	}
	for c := chains; c < 2*chains; c++ {
		store(c)
	}
	if err := ix.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	sh := ix.shards[ix.rootShard(firsts[0])]
	steps, next := 0, 0
	for c := chains; c < 2*chains; c++ {
		k, id := pathKey(rootKey, firsts[c]), uint32(0)
		var ok bool
		if id, ok = sh.lookup(rootID, k); !ok {
			t.Fatalf("chain %d: first node not found", c)
		}
		for i := 1; i < depth; i++ {
			k = pathKey(k, uint64(c)<<20|uint64(i))
			nid, ok := sh.lookup(id, k)
			if !ok {
				t.Fatalf("chain %d: node %d not found", c, i)
			}
			steps++
			if nid == id+1 {
				next++
			}
			id = nid
		}
	}
	if next != steps {
		t.Fatalf("%d of %d steps of the new chains go to the next id, want all", next, steps)
	}
}

// TestFreeListCompaction stores and evicts one chain over and over: each time
// alloc takes the chain's first node from the free list and the rest as their
// parent's next ids, leaving their older listings behind, so the free list
// must be compacted to stay within bounds (CheckInvariants checks the bound
// and that every free node is still listed).
func TestFreeListCompaction(t *testing.T) {
	const depth = 24
	ix := New(Config{SegmentBlocks: depth}) // (each chain one segment)
	w := kv.WorkerRank{ID: "w"}
	run := func(first, tag uint64) []kv.Block {
		blocks := make([]kv.Block, depth)
		for i := range blocks {
			blocks[i] = kv.Block{EngineHash: tag<<16 | uint64(i) + 1, BlockHash: tag<<20 | uint64(i)}
		}
		blocks[0].BlockHash = first
		return blocks
	}
	var second uint64 // a first block in the shard of block 1
	for second = 2; ix.rootShard(second) != ix.rootShard(1); second++ {
	}
	if err := ix.Store(w, 0, false, kv.TierDevice, run(1, 1)); err != nil { // keeps the shard from emptying
		t.Fatal(err)
	}
	sh := ix.shards[ix.rootShard(1)]
	maxListed := 0
	for cycle := range 200 {
		blocks := run(second, 2)
		if err := ix.Store(w, 0, false, kv.TierDevice, blocks); err != nil {
			t.Fatal(err)
		}
		if err := ix.CheckInvariants(); err != nil {
			t.Fatalf("cycle %d, stored: %v", cycle, err)
		}
		maxListed = max(maxListed, len(sh.free))
		for i := depth - 1; i >= 0; i-- {
			if err := ix.Remove(w, []uint64{blocks[i].EngineHash}, kv.TierDevice); err != nil {
				t.Fatal(err)
			}
		}
		if err := ix.CheckInvariants(); err != nil {
			t.Fatalf("cycle %d, evicted: %v", cycle, err)
		}
		maxListed = max(maxListed, len(sh.free))
	}
	if maxListed < 1024 {
		t.Fatalf("the free list never grew past %d ids: compaction was not exercised", maxListed)
	}
}
