package scoring

import (
	"math"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// scratch is per-call working memory, pooled so the hot path allocates little.
type scratch struct {
	hashes  []uint64
	chain   []uint64 // s.hashes' overlay keys, once chained (prefixKeys)
	chained bool
	mmItems []normalize.MMItem
	hasher  normalize.PromptHasher
	matches []radix.Score
	depth   []uint32 // per model rank: union depth
	radixM  []uint32 // per model rank: radix matched
	byTier  [][kv.NumTiers]uint32
	cached  []uint64
	costs   []float64
	// ownSteps, per candidate with Config.Place: this request's own
	// uncached prefill there (spread.go's preferOwn).
	ownSteps []float64
	terms    []costTerms
	cands    []int
	top      []int
	loads    []float64 // per candidate: its rank's guard load, relieved by its cached prefix (balance.go)
	bound    float64   // the largest load admitted (+Inf: every candidate)
	lowest   int       // the cheapest candidate, admitted or not (the first at the lowest cost)
	missed   []slotRank
	fwd      ForwardedRoute // the Route offered to Config.Forward
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// evaluate matches p's hashes (s.hashes, from preparePrompt) against the
// index and the overlay. It fills s.radixM, s.depth and s.byTier per rank
// of the model's rank list, which it returns, and s.cached for every rank
// with radixM > 0 (with withCached, for every rank). Predictions count
// until now.
// The caller holds r.mu for reading.
func (r *Router) evaluate(p *Prompt, s *scratch, withCached bool, now time.Time) ([]*rank, error) {
	ranks := r.models[p.Model]
	if len(ranks) == 0 { // (the model's last worker left since preparePrompt)
		return nil, errNoWorker(p.Model)
	}
	n := len(ranks)
	s.radixM = resize(s.radixM, n)
	s.depth = resize(s.depth, n)
	s.cached = resize(s.cached, n)
	s.byTier = resize(s.byTier, n)
	clear(s.radixM)
	clear(s.byTier)
	const unknown = ^uint64(0)
	if withCached {
		for j := range s.cached {
			s.cached[j] = unknown
		}
	}
	if len(s.hashes) > 0 {
		s.matches = r.cfg.Index.Match(s.hashes, s.matches[:0])
	} else {
		s.matches = s.matches[:0]
	}
	// Index positions of the model's ranks, found through the slot cache
	// (or, the first time a slot is seen, the rank table).
	s.missed = s.missed[:0]
	for i := range s.matches {
		m := &s.matches[i]
		var rk *rank
		if int(m.Slot) < len(r.bySlot) {
			rk = r.bySlot[m.Slot]
		}
		if rk == nil { // (RemoveWorker clears its ranks' slots long before the index may reuse one: radix.Config.SlotReuseDelay)
			w, ok := r.cfg.Index.WorkerOf(m.Slot)
			if !ok {
				continue
			}
			if rk, ok = r.ranks[w]; !ok {
				continue
			}
			s.missed = append(s.missed, slotRank{m.Slot, rk})
		}
		j := rk.idx
		if j >= n || ranks[j] != rk { // (a rank of another model)
			continue
		}
		s.radixM[j] = m.Matched
		s.byTier[j] = m.ByTier
		s.cached[j] = m.Cached
	}
	copy(s.depth, s.radixM)
	if withCached {
		// Match reported the index size of every rank it scored; ask only for the rest.
		for j, rk := range ranks {
			if s.cached[j] == unknown {
				s.cached[j] = r.indexCached(rk)
			}
		}
	}
	s.chained = false // (the pooled scratch holds the last prompt's chain)
	ranks[0].model.overlay.extend(s, ranks, now, r.cfg.DisablePrediction)
	return ranks, nil
}

// prefixKeys returns the overlay's keys of s.hashes (radix.PrefixKeys),
// computed on first use after evaluate: a Route needs them only when the
// overlay holds predictions or it predicts, and they cost a hash per block.
func (s *scratch) prefixKeys() []uint64 {
	if !s.chained {
		s.chain = radix.PrefixKeys(s.hashes, s.chain[:0])
		s.chained = true
	}
	return s.chain
}

// costCandidates keeps the ranks evaluate filled in s that are under the busy
// thresholds in s.cands (index into ranks), with their cost terms in s.terms
// and their costs in s.costs (cost's formula, or under PolicyTime
// timeCoster's, at now). It reports whether any rank is a candidate. The
// caller holds r.mu for reading; it takes the model's lock for the pass.
// It also sets s.bound, the bounded-load guard's (admit).
//
// It visits every rank of the model: a rank that matched nothing still has a
// cost (its load). It is kept cheap per rank instead: the overlap credit is
// summed only for ranks that matched a block, and the slices are written in
// place.
func (r *Router) costCandidates(ranks []*rank, s *scratch, now time.Time) bool {
	promptBlocks := float64(len(s.hashes))
	n := len(ranks)
	// The slices in locals: the loop's stores then need no reload of s.
	cands, costs, terms, loads := resize(s.cands, n), resize(s.costs, n), resize(s.terms, n), resize(s.loads, n)
	depth, radixM, byTier := s.depth[:n], s.radixM[:n], s.byTier[:n]
	k, lowest, lowCost := 0, 0, math.Inf(1)
	timed := r.cfg.Policy == PolicyTime
	var tc timeCoster
	m := ranks[0].model
	m.mu.Lock()
	bal := r.balanceOf(m, ranks)
	bound := r.bound(bal, n, promptBlocks) // (balance.go)
	perCached := r.cachedRelief(promptBlocks)
	over := false
	for j, rk := range ranks {
		if r.busy(rk) {
			continue
		}
		credit := 0.0
		if depth[j] > 0 { // (no matched block: no credit; depth >= radixM)
			credit = r.credit(&byTier[j], depth[j]-radixM[j])
		}
		t := r.cost(promptBlocks, credit, rk)
		if timed {
			if k == 0 {
				tc.begin(r, m, ranks, now)
			}
			t.cost = tc.cost(r, rk, j, s, t)
		}
		load := rk.routed
		if depth[j] > 0 { // (balance.go: a rank's bound grows with the prompt it holds)
			load /= 1 + perCached*float64(depth[j])
		}
		cands[k], terms[k], costs[k], loads[k] = j, t, t.cost, load
		if r.cfg.Place != nil {
			s.ownSteps = append(s.ownSteps[:k], r.ownStep(rk, t, timed))
		}
		over = over || load > bound
		if t.cost < lowCost {
			lowest, lowCost = k, t.cost
		}
		k++
	}
	if timed && k > 0 {
		tc.end()
	}
	s.cands, s.costs, s.terms, s.loads, s.lowest = cands[:k], costs[:k], terms[:k], loads[:k], lowest
	s.bound = math.Inf(1)
	if over && k > 1 {
		s.admit(bound)
	}
	m.mu.Unlock()
	return k > 0
}

// busy reports whether rk is over a busy threshold, and so no candidate.
// The caller holds rk's model's lock.
func (r *Router) busy(rk *rank) bool {
	return (r.cfg.MaxActivePrefillTokens > 0 && rk.prefillTokens >= r.cfg.MaxActivePrefillTokens) ||
		(r.cfg.MaxActiveDecodeBlocks > 0 && rk.decodeBlocks >= r.cfg.MaxActiveDecodeBlocks)
}
