package scoring

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
)

func TestPredictionGroupsBurst(t *testing.T) {
	for _, predict := range []bool{true, false} {
		t.Run(fmt.Sprint("predict=", predict), func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.DisablePrediction = !predict; c.PredictionTTL = time.Minute })
			for i := range 8 {
				f.addWorker(fmt.Sprint("w", i), "m", 1)
			}
			toks := tokens(500, 32*bs)
			first, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			same := 0
			for range 20 {
				d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if d.WorkerID == first.WorkerID {
					same++
					if predict && d.Matched != 32 {
						t.Errorf("predicted match %d, want 32", d.Matched)
					}
				}
			}
			if predict && same != 20 {
				t.Fatalf("with prediction %d of 20 followers went to %s; want all", same, first.WorkerID)
			}
			if !predict && same == 20 {
				t.Fatalf("without prediction every follower tied onto %s; ties should scatter", first.WorkerID)
			}
			if predict {
				res, _ := f.r.Score(&Prompt{Model: "m", Tokens: toks})
				if s := res.Scores[0]; s.WorkerID != first.WorkerID || s.Predicted != 32 || s.ByTier[kv.TierDevice] != 32 || s.Cached != 0 {
					t.Fatalf("score after prediction = %+v", s)
				}
				f.clock.advance(2 * time.Minute)
				res, _ = f.r.Score(&Prompt{Model: "m", Tokens: toks})
				if s := res.Scores[0]; s.Matched != 0 {
					t.Fatalf("prediction outlived its TTL: %+v", s)
				}
			}
		})
	}
}

func TestPredictionMaxBlocks(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.PredictionMaxBlocks = 5; c.PredictionTTL = time.Minute })
	f.addWorker("a", "m", 1)
	toks := tokens(1, 20*bs)
	f.store("a", 0, toks, 3, kv.TierDevice)
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0); err != nil {
		t.Fatal(err)
	}
	res, err := f.r.Score(&Prompt{Model: "m", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	// 3 blocks from the index, then 5 predicted past them, of 20.
	if s := res.Scores[0]; s.Matched != 8 || s.Predicted != 5 {
		t.Fatalf("score after route = %+v; want 8 matched, 5 predicted (cap 5 past the 3 held)", s)
	}
}

// TestShortPromptPredictsNothing: a prompt shorter than one block has no
// blocks to predict. The scratch a Route takes from the pool still holds the
// previous prompt's chain; predicting from it put another prompt's blocks on
// the chosen worker.
func TestShortPromptPredictsNothing(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.PredictionTTL = time.Minute })
	if err := f.r.AddWorker(Worker{ID: "a", Model: "m", Endpoint: "a:8000", DPSize: 1, Approximate: true}); err != nil {
		t.Fatal(err)
	}
	long := tokens(1, 8*bs)
	if _, err := f.r.Score(&Prompt{Model: "m", Tokens: long}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := f.r.Route(&Prompt{Model: "m", Tokens: tokens(9000, 5)}, "", 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	res, err := f.r.Score(&Prompt{Model: "m", Tokens: long})
	if err != nil {
		t.Fatal(err)
	}
	if s := scoreOf(t, res, "a", 0); s.Matched != 0 || s.Predicted != 0 {
		t.Fatalf("after routing short prompts, the long one scores %+v; want nothing matched", s)
	}
}
