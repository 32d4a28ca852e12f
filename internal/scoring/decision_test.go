package scoring

import (
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

func TestRouteMaxCandidates(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true })
	toks := tokens(1, 8*bs)
	for i := range 6 {
		f.addWorker(fmt.Sprint("w", i), "m", 1)
		f.store(fmt.Sprint("w", i), 0, toks, i, kv.TierDevice) // w5 holds the most
	}
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Candidates) != 3 || d.Candidates[0].WorkerID != "w5" || d.Candidates[1].WorkerID != "w4" || d.Candidates[2].WorkerID != "w3" {
		t.Fatalf("candidates %+v; want w5 (chosen), w4, w3", d.Candidates)
	}
}

// With max_candidates 1 the chosen worker must be the one candidate returned,
// also when temperature sampling chose a worker that is not the cheapest.
func TestRouteMaxCandidatesOneKeepsChosen(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true })
	toks := tokens(1, 8*bs)
	for i := range 4 {
		f.addWorker(fmt.Sprint("w", i), "m", 1)
		f.store(fmt.Sprint("w", i), 0, toks, 2*i, kv.TierDevice)
	}
	notCheapest := 0
	for range 200 {
		d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 50, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.WorkerID != "w3" {
			notCheapest++
		}
		if len(d.Candidates) != 1 || d.Candidates[0].WorkerID != d.WorkerID || d.Candidates[0].Cost != d.Cost {
			t.Fatalf("chose %s (cost %v) but candidates are %+v", d.WorkerID, d.Cost, d.Candidates)
		}
	}
	if notCheapest == 0 {
		t.Fatal("temperature 50 never sampled a worker other than the cheapest; the test checks nothing")
	}
}
