package radix

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestWorkerOf names the slots Match reports and no others.
func TestWorkerOf(t *testing.T) {
	ix := New(Config{})
	a, b := kv.WorkerRank{ID: "a"}, kv.WorkerRank{ID: "b", DPRank: 3}
	for _, w := range []kv.WorkerRank{a, b} {
		if err := ix.Store(w, 0, false, kv.TierDevice, []kv.Block{{EngineHash: 1, BlockHash: 10}}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[kv.WorkerRank]bool{}
	for _, s := range ix.Match([]uint64{10}, nil) {
		w, ok := ix.WorkerOf(s.Slot)
		if !ok {
			t.Fatalf("slot %d of a score names no worker", s.Slot)
		}
		got[w] = true
	}
	if len(got) != 2 || !got[a] || !got[b] {
		t.Fatalf("scored %v, want a/0 and b/3", got)
	}
	for _, slot := range []uint32{2, 1 << slotChunkBits, 1 << 31} {
		if w, ok := ix.WorkerOf(slot); ok {
			t.Fatalf("WorkerOf(%d) = %v, want none", slot, w)
		}
	}
}
