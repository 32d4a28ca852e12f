package scoring

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

func TestRouteCostTerms(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true })
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	toks := tokens(7, 8*bs)
	f.store("a", 0, toks, 4, kv.TierHost)   // credit 4*0.75 = 3
	f.store("b", 0, toks, 2, kv.TierDevice) // credit 2
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.WorkerID != "a" || d.Matched != 4 || d.PromptBlocks != 8 || d.Cost != 5 || d.Endpoint != "a:8000" {
		t.Fatalf("decision %+v; want a with matched 4 and cost 8-3 = 5", d)
	}
	want := map[string]Candidate{
		"a": {WorkerID: "a", Matched: 4, PrefillBlocks: 5, Cost: 5},
		"b": {WorkerID: "b", Matched: 2, PrefillBlocks: 6, Cost: 6},
	}
	for _, c := range d.Candidates {
		if c != want[c.WorkerID] {
			t.Errorf("candidate %+v; want %+v", c, want[c.WorkerID])
		}
	}
}

// Predicted blocks count as device blocks: their credit is the device tier's
// weight, not a fixed 1.0.
func TestPredictedCreditUsesDeviceWeight(t *testing.T) {
	w := [kv.NumTiers]float64{0.5, 0.25, 0.1, 0}
	f := newFixture(t, func(c *Config) { c.TierWeights = &w })
	f.addWorker("a", "m", 1)
	toks := tokens(1, 8*bs)
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0); err != nil {
		t.Fatal(err)
	}
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Candidates[0]; c.Matched != 8 || c.PrefillBlocks != 8-8*0.5 {
		t.Fatalf("candidate %+v; want 8 predicted blocks credited at the device weight 0.5 (prefill 4)", c)
	}
}

func TestRouteBusyThresholds(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxActivePrefillTokens = 100; c.DisablePrediction = true })
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	toks := tokens(1, 8*bs) // 128 uncached tokens: one request puts a worker over 100
	seen := map[string]bool{}
	for i := range 2 {
		d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, fmt.Sprint("r", i), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		seen[d.WorkerID] = true
		if len(d.Candidates) != 2-i {
			t.Errorf("route %d had %d candidates, want %d", i, len(d.Candidates), 2-i)
		}
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("two requests went to %v; want one each", seen)
	}
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "r3", 0, 0); !errors.Is(err, ErrResourceExhausted) {
		t.Fatalf("all busy: %v; want ErrResourceExhausted", err)
	}
}
