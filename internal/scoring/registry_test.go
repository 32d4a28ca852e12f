package scoring

import (
	"errors"
	"testing"

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
