package scoring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestCostsMatchReference routes a random workload (prefixes stored at
// random depths, requests routed, marked prefill-done and finished out of
// order, the clock moving, a worker removed and added) and before every
// Route checks the candidates and costs costCandidates computes, with the
// scratch memory Routes reuse, against a reference: the cost formulas
// written plainly (every rank's pending prefills summed, every candidate's
// index size asked of the index, rankDecay computed), from an evaluation
// into fresh memory. They must agree bit for bit: the shortcuts the Route
// path takes must not change a cost, and so no choice.
func TestCostsMatchReference(t *testing.T) {
	for _, v := range []struct {
		name      string
		policy    Policy
		rankRates bool
	}{{"time", PolicyTime, false}, {"time-rank-rates", PolicyTime, true}, {"blocks", PolicyBlocks, false}} {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) {
				c.Policy, c.PrefillWeight, c.RankRates = v.policy, 2, v.rankRates
				c.MaxActivePrefillTokens = 3000 // some ranks busy now and then
			})
			rng := rand.New(rand.NewPCG(5, 6))
			const workers, dp, prefixes = 6, 4, 5
			for w := range workers {
				f.addWorker(fmt.Sprintf("w%d", w), "m", dp)
			}
			prompt := func(i int) []uint32 { return tokens(uint32(1+i*100000), 64*bs) }
			for w := range workers {
				for r := range dp {
					for range rng.IntN(3) {
						f.store(fmt.Sprintf("w%d", w), uint32(r), prompt(rng.IntN(prefixes)), 1+rng.IntN(64), kv.TierDevice)
					}
				}
			}
			reused := new(scratch)
			var active []string
			for i := range 400 {
				p := &Prompt{Model: "m", Tokens: prompt(rng.IntN(prefixes))[:bs*(1+rng.IntN(64))]}
				checkCosts(t, f.r, p, reused)
				id := fmt.Sprintf("q%d", i)
				if _, err := f.r.Route(p, id, 0, 0); err == nil {
					active = append(active, id)
				}
				f.clock.advance(time.Duration(rng.IntN(20)) * time.Millisecond)
				for len(active) > 0 && rng.IntN(3) > 0 {
					k := rng.IntN(len(active))
					if rng.IntN(2) == 0 {
						_ = f.r.MarkPrefillDone(active[k]) // (twice: an error, no change)
					} else {
						_ = f.r.MarkFinished(active[k])
						active = append(active[:k], active[k+1:]...)
					}
				}
				if i == 200 {
					f.r.RemoveWorker("w1")
					f.addWorker("w1", "m", dp)
				}
				if err := f.r.checkInvariants(); err != nil {
					t.Fatalf("after Route %d: %v", i, err)
				}
			}
		})
	}
}

// checkCosts compares costCandidates on reused against the reference.
func checkCosts(t *testing.T, r *Router, p *Prompt, reused *scratch) {
	t.Helper()
	fresh := new(scratch)
	for _, s := range []*scratch{reused, fresh} {
		if err := r.preparePrompt(p, s); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	ranks, err := r.evaluate(p, fresh, false, r.cfg.now())
	if err != nil {
		t.Fatal(err)
	}
	unlock := r.lockModels()
	cands, costs, want := referenceCosts(r, ranks, fresh, r.cfg.now())
	unlock()
	if _, err := r.evaluate(p, reused, false, r.cfg.now()); err != nil {
		t.Fatal(err)
	}
	unlock = r.lockModels()
	admitted := referenceAdmit(r, ranks, float64(len(fresh.hashes)), fresh.depth, cands)
	unlock()
	r.costCandidates(ranks, reused, r.cfg.now())
	var adm []int
	for i := range reused.cands {
		if reused.loads[i] <= reused.bound {
			adm = append(adm, i)
		}
	}
	if fmt.Sprint(adm) != fmt.Sprint(admitted) {
		t.Fatalf("admitted %v, reference %v", adm, admitted)
	}
	if len(reused.cands) != len(cands) {
		t.Fatalf("%d candidates, reference %d", len(reused.cands), len(cands))
	}
	for i := range cands {
		if reused.cands[i] != cands[i] || math.Float64bits(reused.costs[i]) != math.Float64bits(costs[i]) {
			t.Fatalf("candidate %d: rank %d cost %v, reference rank %d cost %v", i, reused.cands[i], reused.costs[i], cands[i], costs[i])
		}
	}
	if r.cfg.Policy != PolicyTime || len(cands) == 0 {
		return
	}
	defer r.lockModels()()
	if fl := r.fleetFor(p.Model); fl != nil && (math.Float64bits(fl.queue) != math.Float64bits(want.queue) || fl.capacity != want.capacity) {
		t.Fatalf("fleet after the Route: queue %v capacity %d, reference %v %d", fl.queue, fl.capacity, want.queue, want.capacity)
	}
}

// referenceCosts is costCandidates' and timeCoster's arithmetic, written
// plainly, without changing the learner's state. The caller holds r.mu for
// reading and r.load.mu.
func referenceCosts(r *Router, ranks []*rank, s *scratch, now time.Time) (cands []int, costs []float64, want fleetAfter) {
	var terms []costTerms
	for j, rk := range ranks {
		if r.busy(rk) {
			continue
		}
		credit := 0.0
		if s.depth[j] > 0 {
			credit = referenceCredit(r, s.byTier[j], s.depth[j]-s.radixM[j])
		}
		prefill := float64(len(s.hashes)) - credit + float64(rk.prefillBlocks)
		decode := float64(rk.decodeBlocks)
		cands, terms = append(cands, j), append(terms, costTerms{prefill: prefill, decode: decode})
		costs = append(costs, r.cfg.PrefillWeight*prefill+decode)
	}
	if r.cfg.Policy == PolicyTime && len(cands) > 0 {
		want = referenceTimeCosts(r, ranks, s, now, cands, terms, costs)
	}
	return cands, costs, want
}

// referenceCredit is the overlap credit as a loop over the tiers (credit
// writes the sum out).
func referenceCredit(r *Router, byTier [kv.NumTiers]uint32, predicted uint32) float64 {
	c := 0.0
	for t, n := range byTier {
		c += r.weights[t] * float64(n)
	}
	return c + r.weights[kv.TierDevice]*float64(predicted)
}

// referenceAdmit is the bounded-load guard written plainly (each rank's
// decayed load as the Route left it; balance_test.go checks the decay): the
// admitted candidates, indices into cands, all of them when nothing is
// excluded. depth is each rank's cached prefix of the x-block prompt.
func referenceAdmit(r *Router, ranks []*rank, x float64, depth []uint32, cands []int) []int {
	all := make([]int, len(cands))
	for i := range all {
		all[i] = i
	}
	f := r.fleetFor(ranks[0].worker.Model)
	if r.cfg.DisableBalance || f == nil || len(cands) < 2 {
		return all
	}
	total := 0.0
	for _, rk := range ranks {
		total += rk.routed
	}
	c := r.cfg.BalanceFactor
	mean := (total + x*max(f.balance.scale, 1)) / float64(len(ranks))
	over := func(j int) float64 { // a rank's load over its bound
		held := float64(depth[j]) / max(x, 1)
		return ranks[j].routed / ((1 + (c-1)*(1+held)/2) * mean)
	}
	least := math.Inf(1)
	for _, j := range cands {
		least = min(least, over(j))
	}
	var kept []int
	for pass := 0; pass < 2 && len(kept) == 0; pass++ {
		for i, j := range cands {
			if (pass == 0 && over(j) <= 1) || (pass == 1 && over(j) == least) {
				kept = append(kept, i)
			}
		}
	}
	return kept
}

// referenceTimeCosts writes PolicyTime's costs of cands into costs.
func referenceTimeCosts(r *Router, ranks []*rank, s *scratch, now time.Time, cands []int, terms []costTerms, costs []float64) (want fleetAfter) {
	f := r.fleetFor(ranks[cands[0]].worker.Model)
	e := ratesOf(f, r.load.priorSPT)
	pending := 0.0
	for _, rk := range ranks {
		pending += float64(rk.timing.pending)
	}
	var capacity uint64
	if f != nil {
		want.queue = fleetKeep*f.queue + (1-fleetKeep)*pending/float64(len(ranks))
		capacity = f.capacity
	}
	for i, j := range cands {
		rk := ranks[j]
		st := &rk.timing.stats
		k := rankDecay(e.seq, rk.timing.seq, e.ranks)
		a := (k*(st.wy-e.slope*st.wx) + e.pseudo*e.intercept) / (k*st.w + e.pseudo)
		if a <= 0 {
			a = (k*st.wy + e.pseudo*e.intercept) / (k*st.w + e.pseudo)
		}
		if !r.cfg.RankRates {
			a = e.intercept // (every rank at its model's rate)
		}
		spt := a + e.slope*terms[i].decode
		occupancy := 0.0
		if e.reuse > 0 {
			cached := r.cfg.Index.Cached(rk.key)
			capacity = max(capacity, cached)
			if capacity > 0 {
				occupancy = float64(cached) / float64(capacity)
			}
		}
		own := max(0, terms[i].prefill-float64(rk.prefillBlocks)) * float64(r.cfg.BlockSize) * spt
		c := waitSeconds(rk, spt, now) + own*(1+e.queue+occupancy*e.reuse)
		if math.IsNaN(c) || math.IsInf(c, 0) {
			c = math.MaxFloat64
		}
		costs[i] = c
	}
	want.capacity = capacity
	return want
}

// fleetAfter is what a Route leaves in the fleet's learner state.
type fleetAfter struct {
	queue    float64
	capacity uint64
}

// TestCreditMatchesLoop checks credit's written-out sum against the loop
// over the tiers, bit for bit, for random tier weights and block counts
// (TestCostsMatchReference stores device blocks only).
func TestCreditMatchesLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	r := &Router{}
	for trial := range 10000 {
		for i := range r.weights {
			r.weights[i] = rng.Float64() * float64(1+rng.IntN(3))
		}
		var byTier [kv.NumTiers]uint32
		for i := range byTier {
			byTier[i] = uint32(rng.IntN(1 << uint(rng.IntN(20))))
		}
		predicted := uint32(rng.IntN(600))
		got, want := r.credit(&byTier, predicted), referenceCredit(r, byTier, predicted)
		if math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("trial %d: credit(%v, %d) with weights %v = %v; the loop gives %v", trial, byTier, predicted, r.weights, got, want)
		}
	}
}
