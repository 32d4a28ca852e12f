package scoring

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

func TestRouteTemperature(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true })
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	toks := tokens(1, 8*bs)
	f.store("a", 0, toks, 8, kv.TierDevice)
	counts := map[string]int{}
	for range 2000 {
		d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 1.0, 0)
		if err != nil {
			t.Fatal(err)
		}
		counts[d.WorkerID]++
	}
	// Normalized costs 0 and 1: P(a) = 1/(1+e^-1) ~ 0.73.
	if pa := float64(counts["a"]) / 2000; pa < 0.66 || pa > 0.80 {
		t.Fatalf("P(a) = %.3f at temperature 1; want about 0.73 (%v)", pa, counts)
	}
	counts = map[string]int{}
	for range 200 {
		d, _ := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
		counts[d.WorkerID]++
	}
	if counts["a"] != 200 {
		t.Fatalf("temperature 0 chose %v; want always a", counts)
	}
	// Ties are broken at random.
	f.addWorker("c", "m", 1)
	f.store("c", 0, toks, 8, kv.TierDevice)
	counts = map[string]int{}
	for range 200 {
		d, _ := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
		counts[d.WorkerID]++
	}
	if counts["a"] < 50 || counts["c"] < 50 || counts["b"] != 0 {
		t.Fatalf("tie between a and c chose %v; want both often, never b", counts)
	}
}
