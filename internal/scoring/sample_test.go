package scoring

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
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

// chooseReference is choose as plainly written: a pass for lo and hi, then
// a reservoir sample over every tie at temperature 0 (or when every cost is
// equal), else a softmax sample. choose must pick what it picks and leave
// the rng where it leaves it.
func chooseReference(rng *rand.Rand, costs []float64, temperature float64, loads []float64, bound float64) int {
	out := func(i int) bool { return loads != nil && loads[i] > bound }
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, c := range costs {
		if !out(i) {
			lo, hi = min(lo, c), max(hi, c)
		}
	}
	if temperature == 0 || hi == lo {
		ties, pick := 0, 0
		for i, c := range costs {
			if c == lo && !out(i) {
				ties++
				if rng.IntN(ties) == 0 {
					pick = i
				}
			}
		}
		return pick
	}
	total := 0.0
	for i, c := range costs {
		if !out(i) {
			total += math.Exp(-((c - lo) / (hi - lo)) / temperature)
		}
	}
	x := rng.Float64() * total
	last := 0
	for i, c := range costs {
		if out(i) {
			continue
		}
		last = i
		x -= math.Exp(-((c - lo) / (hi - lo)) / temperature)
		if x <= 0 {
			return i
		}
	}
	return last
}

// TestChooseMatchesReference draws cost vectors with ties, signed zeros,
// infinities, NaNs and guard loads, and checks choose's pick and the rng's
// next draw against chooseReference from the same seed.
func TestChooseMatchesReference(t *testing.T) {
	r, err := New(Config{Index: radix.New(radix.Config{}), Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	gen := rand.New(rand.NewPCG(5, 6))
	special := []float64{0, math.Copysign(0, -1), 1, 2, math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat64}
	for trial := range 100000 {
		n := 1 + gen.IntN(12)
		costs := make([]float64, n)
		for i := range costs {
			switch gen.IntN(4) {
			case 0:
				costs[i] = special[gen.IntN(len(special))]
			case 1:
				costs[i] = float64(gen.IntN(3))
			default:
				costs[i] = gen.Float64() * 10
			}
		}
		var loads []float64
		bound := 0.0
		if gen.IntN(2) == 0 {
			loads = make([]float64, n)
			for i := range loads {
				loads[i] = float64(gen.IntN(4))
			}
			bound = float64(1 + gen.IntN(3))
			loads[gen.IntN(n)] = 0 // (at least one admitted)
		}
		temperature := []float64{0, 0, 0.5, 1}[gen.IntN(4)]
		seed := gen.Uint64()
		r.rng = rand.New(rand.NewPCG(seed, seed))
		ref := rand.New(rand.NewPCG(seed, seed))
		got := r.choose(costs, temperature, loads, bound)
		want := chooseReference(ref, costs, temperature, loads, bound)
		if got != want {
			t.Fatalf("trial %d: choose(%v, %v, %v, %v) = %d; reference %d", trial, costs, temperature, loads, bound, got, want)
		}
		if g, w := r.rng.Uint64(), ref.Uint64(); g != w {
			t.Fatalf("trial %d: choose(%v, %v, %v, %v) left the rng at another state than the reference", trial, costs, temperature, loads, bound)
		}
	}
}
