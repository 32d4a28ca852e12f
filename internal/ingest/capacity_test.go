package ingest

import (
	"runtime"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// held lists the engine hashes w holds, sorted.
func held(t *testing.T, idx *radix.Index, w kv.WorkerRank) []uint64 {
	t.Helper()
	var c claimLog
	if err := idx.NewExporter().Rank(w, &claimExport{&c}); err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, b := range c.held {
		out = append(out, b.eh)
	}
	slices.Sort(out)
	return out
}

// run is a chain of n blocks with engine hashes from, from+1, ...
func run(from uint64, n int) []kv.Block {
	bs := make([]kv.Block, n)
	for i := range bs {
		bs[i] = kv.Block{EngineHash: from + uint64(i), BlockHash: (from + uint64(i)) * 0x9e3779b97f4a7c15}
	}
	return bs
}

// TestTrimOldestFirst: an inexact rank over its capacity drops the blocks
// it held before it became inexact first, deepest first (a prefix goes
// last), every copy of them on every tier, then the blocks stored since, in
// store order; blocks removed since are skipped.
func TestTrimOldestFirst(t *testing.T) {
	idx := radix.New(radix.Config{})
	w := kv.WorkerRank{ID: "w"}
	s := newIndexSink(idx, w, testBlockSize, 0, nil)
	store := func(bs []kv.Block) {
		t.Helper()
		if err := idx.Store(w, 0, false, kv.TierDevice, bs); err != nil {
			t.Fatal(err)
		}
		if s.claims.on {
			s.claims.note(0, false, bs)
		}
	}
	store(run(1, 4)) // held before it became inexact: one chain, 1 its first block
	if err := idx.StoreTier(w, []uint64{3}, kv.TierHost); err != nil {
		t.Fatal(err)
	}
	s.track(true)
	store(run(100, 3)) // stored since, in this order
	store(run(200, 2))
	if err := idx.Remove(w, []uint64{100}, kv.TierDevice); err != nil {
		t.Fatal(err)
	}
	// Held: 1-4 (3 on two tiers), 101-102, 200-201: 8 blocks.
	if n := s.trim(8); n != 0 {
		t.Fatalf("at its capacity, trim dropped %d", n)
	}
	if n := s.trim(5); n != 3 {
		t.Fatalf("trim(5) dropped %d, want 3", n)
	}
	// The older chain's three deepest blocks went; its first stays.
	if got := held(t, idx, w); !slices.Equal(got, []uint64{1, 101, 102, 200, 201}) {
		t.Fatalf("after trim(5) holds %v, want [1 101 102 200 201]", got)
	}
	if n := s.trim(2); n != 3 {
		t.Fatalf("trim(2) dropped %d, want 3", n)
	}
	if got := held(t, idx, w); !slices.Equal(got, []uint64{200, 201}) {
		t.Fatalf("after trim(2) holds %v, want [200 201] (the last stored)", got)
	}
	if got := idx.Cached(w); got != 2 {
		t.Fatalf("Cached %d, want 2", got)
	}
	if err := idx.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	// A margin below a larger capacity: trimming does not export the rank
	// on every batch.
	store(run(300, 40))
	if n := s.trim(32); n != 12 {
		t.Fatalf("trim(32) of 42 dropped %d, want 12 (down to 32 - 32/%d)", n, trimMargin)
	}
	s.track(false)
	if s.claims.fresh != nil || s.claims.order != nil {
		t.Fatal("track(false) kept the claim log")
	}
}

// TestTrimWaitsAndKeepsUsedPrefixes: an inexact rank trims only once the
// engine has stored its capacity since it became inexact (before that, a
// block the router drops may be one the engine holds and will extend); an
// older block the engine has stored under since goes after every block
// stored since, with its ancestors, so that the engine's next stores under
// it still find their parent.
func TestTrimWaitsAndKeepsUsedPrefixes(t *testing.T) {
	idx := radix.New(radix.Config{})
	w := kv.WorkerRank{ID: "w"}
	s := newIndexSink(idx, w, testBlockSize, 0, nil)
	store := func(parent uint64, bs []kv.Block) {
		t.Helper()
		if err := idx.Store(w, parent, parent != 0, kv.TierDevice, bs); err != nil {
			t.Fatal(err)
		}
		if s.claims.on {
			s.claims.note(parent, parent != 0, bs)
		}
	}
	store(0, run(1, 4))  // an older chain the engine goes on using: 1-4
	store(0, run(11, 4)) // one it does not: 11-14
	s.track(true)
	store(4, run(100, 2)) // under 4
	if n := s.trim(6); n != 0 {
		t.Fatalf("trim after 2 blocks stored, capacity 6: dropped %d, want none yet", n)
	}
	store(101, run(200, 4)) // 6 stored since: a capacity's worth
	// Held: 1-4, 11-14, 100-101, 200-203 (14); trim(6) keeps 6.
	if n := s.trim(6); n != 8 {
		t.Fatalf("trim(6) of 14 dropped %d, want 8", n)
	}
	// The unused chain goes (4), then the oldest stored since (100-101, 200,
	// 201) before the used chain 1-4.
	if got := held(t, idx, w); !slices.Equal(got, []uint64{1, 2, 3, 4, 202, 203}) {
		t.Fatalf("after trim(6) holds %v, want [1 2 3 4 202 203]", got)
	}
	store(4, run(300, 1)) // the engine stores under 4 again: its parent is there
}

// BenchmarkClaimLogMemory reports the heap an inexact rank's claim log costs
// per block stored since the rank became inexact (an exact rank has none).
func BenchmarkClaimLogMemory(b *testing.B) {
	const blocks = 1 << 17
	bs := run(1, blocks)
	var before, after runtime.MemStats
	for range b.N {
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := &claimLog{}
		c.fresh, c.touched = make(map[uint64]struct{}), make(map[uint64]struct{})
		for i := 0; i < blocks; i += 64 {
			c.note(0, false, bs[i:i+64])
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/blocks, "bytes/claim")
		runtime.KeepAlive(c)
	}
}
