package scoring

import (
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// TestDefaultPrefillWeight checks that a zero PrefillWeight means 2.
func TestDefaultPrefillWeight(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true; c.PrefillWeight = 0 })
	f.addWorker("a", "m", 1)
	toks := tokens(7, 8*bs)
	f.store("a", 0, toks, 3, kv.TierDevice)
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Cost != 2*(8-3) || d.Candidates[0].PrefillBlocks != 5 {
		t.Fatalf("decision %+v; want cost 2 x 5 prefill blocks = 10", d)
	}
}

// A Config's zero fields take DefaultConfig's values (which cmd/router reads
// as its own defaults), and each DefaultConfig has its own tier weights.
func TestZeroConfigTakesDefaultConfig(t *testing.T) {
	r, err := New(Config{Index: radix.New(radix.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	got, want := r.cfg, DefaultConfig()
	if r.weights != *want.TierWeights || *got.TierWeights != *want.TierWeights {
		t.Fatalf("tier weights %v (config %v); want %v", r.weights, *got.TierWeights, *want.TierWeights)
	}
	if got.now == nil {
		t.Fatal("no clock")
	}
	got.Index, got.TierWeights, got.now = nil, nil, nil
	want.TierWeights, want.now = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("config after New = %+v; want DefaultConfig %+v", got, want)
	}
	a, b := DefaultConfig(), DefaultConfig()
	a.TierWeights[0] = 0.5
	if b.TierWeights[0] != 1 || DefaultConfig().TierWeights[0] != 1 {
		t.Fatal("a write through one DefaultConfig's TierWeights changed another's")
	}
}
