package scoring

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/kvrouter/kvrouter/internal/kv"
)

func TestRemoveWorkerReleasesLoad(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 2)
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: tokens(1, 32)}, "r1", 0, 0); err != nil {
		t.Fatal(err)
	}
	f.r.RemoveWorker("a")
	if err := f.r.MarkFinished("r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("request of a removed worker: %v; want ErrNotFound", err)
	}
	if len(f.r.Loads()) != 0 {
		t.Fatalf("loads after removal: %v", f.r.Loads())
	}
	if err := f.r.AddWorker(Worker{ID: "a", Model: "m"}); err != nil {
		t.Fatalf("re-adding a removed worker: %v", err)
	}
}

func TestSlotCacheFollowsReRegistration(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 1)
	toks := tokens(1, 4*bs)
	f.store("a", 0, toks, 4, kv.TierDevice)
	for range 2 { // the first Score learns a's slot, the second uses it
		res, err := f.r.Score(&Prompt{Model: "m", Tokens: toks})
		if err != nil || res.Scores[0].Matched != 4 {
			t.Fatalf("score = %+v, %v", res, err)
		}
	}
	// a moves to another model: the cached slot must not keep it in model m.
	f.r.RemoveWorker("a")
	f.addWorker("a", "m2", 1)
	f.addWorker("b", "m", 1)
	res, err := f.r.Score(&Prompt{Model: "m", Tokens: toks})
	if err != nil || len(res.Scores) != 1 || res.Scores[0].WorkerID != "b" || res.Scores[0].Matched != 0 {
		t.Fatalf("model m after a left = %+v, %v; want only b with 0", res, err)
	}
	res, err = f.r.Score(&Prompt{Model: "m2", Tokens: toks})
	if err != nil || res.Scores[0].WorkerID != "a" || res.Scores[0].Matched != 4 {
		t.Fatalf("model m2 = %+v, %v; want a with 4", res, err)
	}
}

// TestRankLayout checks rank's layout for costCandidates: what a Route reads
// for every rank (rank's comment) lies in its first cache line, and the rank
// is in the 256-byte size class (aligned to 256, so that line is one line).
func TestRankLayout(t *testing.T) {
	var rk rank
	hot := []struct {
		name      string
		off, size uintptr
	}{
		{"idx", unsafe.Offsetof(rk.idx), unsafe.Sizeof(rk.idx)},
		{"prefillBlocks", unsafe.Offsetof(rk.prefillBlocks), unsafe.Sizeof(rk.prefillBlocks)},
		{"decodeBlocks", unsafe.Offsetof(rk.decodeBlocks), unsafe.Sizeof(rk.decodeBlocks)},
		{"routed", unsafe.Offsetof(rk.routed), unsafe.Sizeof(rk.routed)},
		{"timing.pending", unsafe.Offsetof(rk.timing) + unsafe.Offsetof(rk.timing.pending), unsafe.Sizeof(rk.timing.pending)},
		{"timing.spt", unsafe.Offsetof(rk.timing) + unsafe.Offsetof(rk.timing.spt), unsafe.Sizeof(rk.timing.spt)},
	}
	for _, f := range hot {
		if f.off+f.size > 64 {
			t.Errorf("rank.%s ends at byte %d, past the first 64", f.name, f.off+f.size)
		}
	}
	if n := unsafe.Sizeof(rk); n <= 240 || n > 256 {
		t.Errorf("rank is %d bytes, want 241..256 (the 256-byte size class)", n)
	}
}
