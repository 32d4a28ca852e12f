package scoring

import (
	"math"
	"time"
)

// timeCoster is PolicyTime's cost of a Route's candidates, in seconds,
// with every parameter learned from MarkPrefillDone timings and Routes
// (learner.go):
//
//	spt     = a_rank + b x decode blocks          seconds per prefill token
//	wait    = active prefill tokens x spt - time the oldest has run
//	          (at least the others' average share: waitSeconds)
//	own     = (prompt blocks - overlap credit) x block size x spt
//	cost    = wait + own x (1 + queue + occupancy x reuse)
//
// wait + own is the request's expected TTFT on the rank. The rest is what
// the choice costs later requests: queue (the mean number of prefills queued
// or running on a rank, as Routes see it) is how many requests a second of added
// prefill delays, by Little's law for a work-conserving queue; occupancy x
// reuse prices the blocks the prompt stores: once a rank's cache is full
// (occupancy = its index size over the largest seen on the model's ranks)
// each stored block evicts one, worth reuse = hits / stored blocks, the
// fleet's observed future hits per stored block, in blocks of prefill that
// will have to be redone. a_rank is the rank's seconds per token (shrunk
// toward the fleet's, which starts at Config.PrefillTokensPerSecond), b the
// fleet's slope on decode load (0 until the data show one).
//
// costCandidates calls begin at its first candidate, cost for each candidate
// in rank order (the largest index size seen grows along them), and end
// after the last, all under the model's lock: one pass over the ranks for both
// policies. The index size of a rank Match scored is the one it reported
// (evaluate's s.cached); only the others' are looked up.
type timeCoster struct {
	f        *fleetTiming
	e        rates
	bs       float64
	queue1   float64 // 1 + e.queue
	capacity uint64
	now      time.Time
}

// begin reads the model's learned rates and, from the pending prefills of
// its ranks, updates the fleet's queue average (for later Routes: this one
// prices with the average before it). The caller holds r.mu for reading and
// m.mu.
func (c *timeCoster) begin(r *Router, m *model, ranks []*rank, now time.Time) {
	f := &m.fleet
	*c = timeCoster{f: f, e: ratesOf(f, r.load.priorSPT), bs: float64(r.cfg.BlockSize), now: now}
	c.queue1 = 1 + c.e.queue
	c.e.gen = m.gen               // (the rates were read at this generation)
	pending := float64(m.pending) // (the sum over ranks)
	if f.ranks != len(ranks) {
		f.ranks = len(ranks)
		m.gen++ // (the next Route's rates decay by the new count)
	}
	f.queue = fleetKeep*f.queue + (1-fleetKeep)*pending/float64(len(ranks))
	c.capacity = f.capacity
}

// cost is rk's cost, rk being rank j of the model's list with terms t.
func (c *timeCoster) cost(r *Router, rk *rank, j int, s *scratch, t costTerms) float64 {
	// rk's seconds per token, from its memo when that is for this
	// generation and decode load (the check written here, inlined).
	spt := rk.timing.spt.value
	if m := &rk.timing.spt; m.gen != c.e.gen || m.decode != t.decode {
		spt = c.e.rememberSecondsPerToken(&rk.timing, t.decode)
	}
	occupancy := 0.0
	if c.e.reuse > 0 {
		cached := s.cached[j] // (Match's report, for a rank it scored)
		if s.radixM[j] == 0 {
			cached = r.indexCached(rk)
		}
		c.capacity = max(c.capacity, cached)
		if c.capacity > 0 {
			occupancy = float64(cached) / float64(c.capacity)
		}
	}
	// t.prefill is prompt blocks - credit + active prefill blocks.
	own := max(0, t.prefill-float64(rk.prefillBlocks)) * c.bs * spt
	wait := 0.0 // (waitSeconds of a rank with no pending prefill, without the call)
	if rk.timing.pending != 0 {
		wait = waitSeconds(rk, spt, c.now)
	}
	cost := wait + own*(c.queue1+occupancy*c.e.reuse)
	if cost-cost != 0 { // (NaN or ±Inf: math.IsNaN || math.IsInf in one test)
		cost = math.MaxFloat64
	}
	return cost
}

// end records the largest index size seen.
func (c *timeCoster) end() {
	c.f.capacity = c.capacity
}
