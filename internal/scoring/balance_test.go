package scoring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// guardLoads returns every rank's guard load in blocks, by worker id.
func guardLoads(r *Router, model string) (map[string]float64, float64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	defer r.lockModels()()
	scale := 1.0
	if f := r.fleetFor(model); f != nil {
		scale = max(f.balance.scale, 1)
	}
	out := map[string]float64{}
	total := 0.0
	for _, rk := range r.models[model] {
		out[rk.key.ID] = rk.routed / scale
		total += rk.routed / scale
	}
	return out, total
}

// TestGuardBoundsAStickyPrefix routes prompts of 1-255 blocks that all
// extend one 128-block prefix cached on w0 (the worst case for balance: the
// cost sends every one to w0), some finished, some left in flight. A
// request's load is its prefill, the blocks its rank did not hold. With the
// guard every Route must leave the chosen rank within its bound plus the
// request ((1 + (c - 1) (1 + held) / 2) x the mean, held the share of the
// prompt it holds), and w0 takes a share of the prefill near c x the mean
// (the bound is on the window, not the whole run); without it w0 takes
// over twice the mean. The guard's loads must also be the plain decayed sums
// (forward decay, rescaled past maxScale: with c = 3 the window is
// 8 x (2/2)^2 = 8 requests, so 3,000 Routes grow the scale past 1e100 many
// times).
func TestGuardBoundsAStickyPrefix(t *testing.T) {
	const ranks = 8
	for _, c := range []float64{0, 1.3, 3} {
		t.Run(fmt.Sprintf("c=%v", c), func(t *testing.T) {
			f := newFixture(t, func(cfg *Config) {
				cfg.Policy, cfg.DisablePrediction = PolicyTime, true
				cfg.BalanceFactor, cfg.DisableBalance = c, c == 0
			})
			for w := range ranks {
				f.addWorker(fmt.Sprintf("w%d", w), "m", 1)
			}
			prefix := tokens(1, 256*bs)
			const held = 128
			f.store("w0", 0, prefix[:held*bs], held, kv.TierDevice)
			rng := rand.New(rand.NewPCG(3, 4))
			n := 3000
			window := math.Inf(1)
			if c > 1 {
				window = float64(ranks) * 4 / ((c - 1) * (c - 1))
			}
			type routed struct {
				id     string
				blocks float64
			}
			var history []routed
			sent := map[string]float64{} // prefill blocks
			took := map[string]int{}     // requests
			var active []string
			diverted := 0
			for i := range n {
				x := 1 + rng.IntN(255)
				before, total := guardLoads(f.r, "m")
				id := fmt.Sprint("q", i)
				dec, err := f.r.Route(&Prompt{Model: "m", Tokens: prefix[:x*bs]}, id, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				prefill := float64(x) - float64(dec.Matched)
				sent[dec.WorkerID] += prefill
				took[dec.WorkerID]++
				if dec.Diverted {
					// Only the guard diverts, and it costs at most what w0
					// held of the prompt (the cheapest may be another rank,
					// one the time cost prefers for its empty queue).
					if c == 0 || dec.DivertedBlocks > uint32(min(x, held)) {
						t.Fatalf("Route %d: diverted to %s losing %d blocks of %d (c=%v)", i, dec.WorkerID, dec.DivertedBlocks, x, c)
					}
					diverted++
				}
				history = append(history, routed{dec.WorkerID, prefill})
				if c > 0 {
					share := float64(dec.Matched) / float64(x)
					bound := (1 + (c-1)*(1+share)/2) * (total + float64(x)) / ranks
					if before[dec.WorkerID] > bound*(1+1e-9) {
						t.Fatalf("Route %d: %s at %.1f blocks, over the bound %.1f", i, dec.WorkerID, before[dec.WorkerID], bound)
					}
				}
				active = append(active, id)
				for len(active) > 4 || (len(active) > 0 && rng.IntN(2) == 0) {
					k := rng.IntN(len(active))
					if err := f.r.MarkFinished(active[k]); err != nil {
						t.Fatal(err)
					}
					active = append(active[:k], active[k+1:]...)
				}
			}
			got, _ := guardLoads(f.r, "m")
			want := map[string]float64{}
			for k, h := range history {
				want[h.id] += h.blocks * math.Exp(-float64(len(history)-1-k)/window)
			}
			for id, w := range want {
				if c == 0 {
					break // (no window to check against)
				}
				if math.Abs(got[id]-w) > 1e-6*math.Max(1, w) {
					t.Fatalf("%s: guard load %v, decayed sum %v", id, got[id], w)
				}
			}
			maxSent, mean := 0.0, 0.0
			for _, v := range sent {
				maxSent = max(maxSent, v)
				mean += v / ranks
			}
			imbalance := maxSent / mean
			t.Logf("c=%v: w0 took %.0f%% of the blocks, imbalance %.2f", c, 100*sent["w0"]/(mean*ranks), imbalance)
			switch {
			case c == 0 && sent["w0"] <= 2*mean:
				t.Fatalf("without the guard w0 took %.0f prefill blocks of %.0f (%d of %d requests): the prompts do not pile, so the test shows nothing", sent["w0"], mean*ranks, took["w0"], n)
			case c > 0 && sent["w0"] > 2*c*mean:
				t.Fatalf("with the guard w0 took %.0f blocks, over 2c x the mean %.0f", sent["w0"], mean)
			case c > 0 && diverted == 0:
				t.Fatalf("with the guard no Route was reported diverted, though w0 took %.0f of %.0f blocks", sent["w0"], mean*ranks)
			}
		})
	}
}

// TestImbalances: a model whose Routes all went to one of its two ranks,
// each prefilling there, reports 2 (twice the mean), one not yet routed 0.
func TestImbalances(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisableBalance = true; c.DisablePrediction = true })
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	f.addWorker("c", "idle", 1)
	toks := tokens(1, 4*bs)
	f.store("a", 0, toks, 2, kv.TierDevice)
	for i := range 3 {
		if d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, fmt.Sprint("r", i), 0, 0); err != nil || d.WorkerID != "a" {
			t.Fatalf("route %d: %v, %v", i, d, err)
		}
		if err := f.r.MarkFinished(fmt.Sprint("r", i)); err != nil {
			t.Fatal(err)
		}
	}
	got := f.r.Imbalances()
	want := []Imbalance{{Model: "idle"}, {Model: "m", Ratio: 2}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Imbalances() = %v; want %v", got, want)
	}
}
