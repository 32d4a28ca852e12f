package scoring

import (
	"fmt"
	"math"
	"time"
)

// Policy names a cost function.
type Policy string

const (
	// PolicyTime costs a candidate in seconds: the request's expected time
	// to first token there plus the prefill time the choice costs the fleet
	// (see costTime). The default.
	PolicyTime Policy = "time"
	// PolicyBlocks is the cost in blocks:
	// PrefillWeight x (prompt blocks - overlap credit + active prefill
	// blocks) + active decode blocks.
	PolicyBlocks Policy = "blocks"
)

// ParsePolicy checks a policy name.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case PolicyTime, PolicyBlocks:
		return p, nil
	}
	return "", fmt.Errorf("scoring: policy %q: want %s or %s", s, PolicyTime, PolicyBlocks)
}

// costTime is PolicyTime's cost of each candidate left in s.cands, in
// seconds, with every parameter learned from MarkPrefillDone timings and
// Routes (timecost.go):
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
// The index size of a rank Match scored is the one it reported (evaluate's
// s.cached); only the others' are looked up.
//
// The caller holds r.mu for reading and r.load.mu.
func (r *Router) costTime(ranks []*rank, s *scratch, now time.Time) {
	if len(s.cands) == 0 {
		return
	}
	f := r.load.fleetOf(ranks[s.cands[0]].worker.Model)
	e := ratesOf(f, r.load.priorSPT)
	pending := float64(r.load.pending[ranks[0].worker.Model]) // (the sum over ranks)
	bs := float64(r.cfg.BlockSize)
	var capacity uint64
	if f != nil {
		f.ranks = len(ranks)
		f.queue = fleetKeep*f.queue + (1-fleetKeep)*pending/float64(len(ranks))
		capacity = f.capacity
	}
	for i, j := range s.cands {
		rk := ranks[j]
		spt := e.secondsPerToken(&rk.timing, s.terms[i].decode)
		occupancy := 0.0
		if e.reuse > 0 {
			cached := s.cached[j] // (Match's report, for a rank it scored)
			if s.radixM[j] == 0 {
				cached = r.cfg.Index.Cached(rk.key)
			}
			capacity = max(capacity, cached)
			if capacity > 0 {
				occupancy = float64(cached) / float64(capacity)
			}
		}
		// terms.prefill is prompt blocks - credit + active prefill blocks.
		own := max(0, s.terms[i].prefill-float64(rk.prefillBlocks)) * bs * spt
		c := waitSeconds(rk, spt, now) + own*(1+e.queue+occupancy*e.reuse)
		if math.IsNaN(c) || math.IsInf(c, 0) {
			c = math.MaxFloat64
		}
		s.costs[i], s.terms[i].cost = c, c
	}
	if f != nil {
		f.capacity = capacity
	}
}
