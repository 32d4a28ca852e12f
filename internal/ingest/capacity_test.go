package ingest

import (
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// held lists the engine hashes w holds, sorted.
func held(t *testing.T, idx *radix.Index, w kv.WorkerRank) []uint64 {
	t.Helper()
	var bs []heldBlock
	if err := idx.NewExporter().Rank(w, bindingCollector{out: &bs}); err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, b := range bs {
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
// it held before it became inexact first (every copy of them, on every
// tier), then the blocks stored since, in store order; blocks removed since
// are skipped.
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
			s.claims.note(bs)
		}
	}
	store(run(1, 4)) // held before it became inexact
	if err := idx.StoreTier(w, []uint64{2}, kv.TierHost); err != nil {
		t.Fatal(err)
	}
	s.track(true)
	store(run(100, 3)) // stored since, in this order
	store(run(200, 2))
	if err := idx.Remove(w, []uint64{100}, kv.TierDevice); err != nil {
		t.Fatal(err)
	}
	// Held: 1-4 (2 on two tiers), 101-102, 200-201: 8 blocks.
	if n := s.trim(8); n != 0 {
		t.Fatalf("at its capacity, trim dropped %d", n)
	}
	if n := s.trim(5); n != 3 {
		t.Fatalf("trim(5) dropped %d, want 3", n)
	}
	// Three of the four older blocks went (which three: export order).
	old := 0
	for _, eh := range held(t, idx, w) {
		if eh < 100 {
			old++
		}
	}
	if got := held(t, idx, w); old != 1 || len(got) != 5 || !slices.Contains(got, 101) || !slices.Contains(got, 201) {
		t.Fatalf("after trim(5) holds %v: want one older block and 101, 102, 200, 201", got)
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
