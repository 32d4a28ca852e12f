package scoring

import (
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// scratch is per-call working memory, pooled so the hot path allocates little.
type scratch struct {
	hashes  []uint64
	chain   []uint64
	mmItems []normalize.MMItem
	hasher  normalize.PromptHasher
	matches []radix.Score
	depth   []uint32 // per model rank: union depth
	radixM  []uint32 // per model rank: radix matched
	byTier  [][kv.NumTiers]uint32
	cached  []uint64
	costs   []float64
	prefill []float64
	decode  []float64
	cands   []int
	top     []int
	missed  []slotRank
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// evaluate matches p's hashes (s.hashes, from preparePrompt) against the
// index and the overlay. It fills s.radixM, s.depth and s.byTier (and, with
// withCached, s.cached) per rank of the model's rank list, which it returns.
// The caller holds r.mu for reading.
func (r *Router) evaluate(p *Prompt, s *scratch, withCached bool) ([]*rank, error) {
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
		if rk.worker.Model != p.Model {
			continue
		}
		j := rk.idx
		s.radixM[j] = m.Matched
		s.byTier[j] = m.ByTier
		s.cached[j] = m.Cached
	}
	copy(s.depth, s.radixM)
	if withCached {
		// Match reported the index size of every rank it scored; ask only for the rest.
		for j, rk := range ranks {
			if s.cached[j] == unknown {
				s.cached[j] = r.cfg.Index.Cached(rk.key)
			}
		}
	}
	s.chain = s.chain[:0] // (the pooled scratch holds the last prompt's)
	if len(s.hashes) > 0 {
		s.chain = radix.PrefixKeys(s.hashes, s.chain)
		r.overlay.extend(s.chain, ranks, s.radixM, s.depth, r.cfg.now(), r.cfg.DisablePrediction)
	}
	return ranks, nil
}

// costCandidates keeps the ranks evaluate filled in s that are under the busy
// thresholds, with their cost terms, in s.cands (index into ranks), s.prefill,
// s.decode and s.costs:
//
//	prefill = prompt blocks - overlap credit + active prefill blocks
//	cost    = PrefillWeight * prefill + active decode blocks
//
// The overlap credit weighs each matched block by its best tier's weight.
// Under PolicyTime, costTime then replaces the costs with seconds.
// It reports whether any rank is a candidate. The caller holds r.mu for
// reading.
func (r *Router) costCandidates(ranks []*rank, s *scratch) bool {
	promptBlocks := float64(len(s.hashes))
	s.cands = s.cands[:0]
	s.costs = s.costs[:0]
	s.prefill = s.prefill[:0]
	s.decode = s.decode[:0]
	r.load.mu.Lock()
	defer r.load.mu.Unlock()
	for j, rk := range ranks {
		if r.cfg.MaxActivePrefillTokens > 0 && rk.prefillTokens >= r.cfg.MaxActivePrefillTokens {
			continue
		}
		if r.cfg.MaxActiveDecodeBlocks > 0 && rk.decodeBlocks >= r.cfg.MaxActiveDecodeBlocks {
			continue
		}
		credit := 0.0
		for t, n := range s.byTier[j] {
			credit += r.weights[t] * float64(n)
		}
		credit += r.weights[kv.TierDevice] * float64(s.depth[j]-s.radixM[j]) // predicted blocks count as device blocks
		prefill := promptBlocks - credit + float64(rk.prefillBlocks)
		decode := float64(rk.decodeBlocks)
		s.cands = append(s.cands, j)
		s.costs = append(s.costs, r.cfg.PrefillWeight*prefill+decode)
		s.prefill = append(s.prefill, prefill)
		s.decode = append(s.decode, decode)
	}
	if r.cfg.Policy == PolicyTime {
		r.costTime(ranks, s, r.cfg.now())
	}
	return len(s.cands) > 0
}
