package scoring

import (
	"math"
	"slices"
)

// Decision answers Route.
type Decision struct {
	WorkerID     string
	DPRank       uint32
	Endpoint     string
	Matched      uint32
	PromptBlocks uint32
	Cost         float64
	// Diverted is set when the bounded-load guard excluded the cheapest
	// candidate (balance.go), and DivertedBlocks is how many more blocks of
	// the prompt that candidate holds than the chosen one: the prefill the
	// balance cost this request.
	Diverted       bool
	DivertedBlocks uint32
	// Reason is why this worker was chosen (one of the Reason* names).
	Reason string
	// RandomMatched is the mean matched blocks over the candidates: what a
	// uniformly random choice among them (round robin's) would have matched.
	RandomMatched float64
	// Candidates has the candidates' cost terms, the chosen one first (the
	// status page and RouteResponse readers take the first for the choice).
	Candidates []Candidate
}

// Why a Route chose its worker (Decision.Reason).
const (
	// ReasonSingle: one candidate was under the busy thresholds.
	ReasonSingle = "single"
	// ReasonGuard: the bounded-load guard excluded the cheapest candidate.
	ReasonGuard = "guard"
	// ReasonSampled: temperature sampling picked a candidate other than the
	// cheapest admitted one.
	ReasonSampled = "sampled"
	// ReasonCache: the chosen worker holds more of the prompt than some
	// other candidate and no candidate holds more: the cache decided.
	ReasonCache = "cache"
	// ReasonLoad: every other reason: the candidates holding the most of
	// the prompt hold the same, or the load outweighed a longer match.
	ReasonLoad = "load"
)

// Reasons lists the Reason* names.
var Reasons = []string{ReasonCache, ReasonLoad, ReasonGuard, ReasonSampled, ReasonSingle}

// Candidate is one candidate's cost terms.
type Candidate struct {
	WorkerID      string
	DPRank        uint32
	Matched       uint32
	PrefillBlocks float64
	DecodeBlocks  float64
	Cost          float64
}

// fillDecision describes candidate pick of s (an index into s.cands) as the
// choice in dec, with every candidate or, for maxCandidates > 0, that many
// cheapest, the chosen one first either way. dec.Candidates' memory is
// reused.
func fillDecision(dec *Decision, ranks []*rank, s *scratch, pick, maxCandidates int) {
	chosen := ranks[s.cands[pick]]
	*dec = Decision{
		WorkerID: chosen.key.ID, DPRank: chosen.key.DPRank, Endpoint: chosen.worker.endpoint(chosen.key.DPRank),
		Matched: s.depth[s.cands[pick]], PromptBlocks: uint32(len(s.hashes)), Cost: s.costs[pick],
		Candidates: dec.Candidates[:0],
	}
	if maxCandidates <= 0 || maxCandidates >= len(s.cands) {
		dec.Candidates = slices.Grow(dec.Candidates, len(s.cands))
		dec.Candidates = append(dec.Candidates, s.candidate(ranks, pick))
		for i := range s.cands {
			if i != pick {
				dec.Candidates = append(dec.Candidates, s.candidate(ranks, i))
			}
		}
		return
	}
	s.top = cheapest(s.costs, pick, maxCandidates, s.top[:0])
	dec.Candidates = slices.Grow(dec.Candidates, len(s.top))
	for _, c := range s.top {
		dec.Candidates = append(dec.Candidates, s.candidate(ranks, c))
	}
}

// explain sets dec.Reason and dec.RandomMatched for candidate pick of s,
// after diversion set dec.Diverted.
func (s *scratch) explain(dec *Decision, pick int, temperature float64) {
	n := len(s.cands)
	var sum uint64
	var most, least uint32 = 0, math.MaxUint32
	lowest := math.Inf(1) // the cheapest admitted cost
	for i, j := range s.cands {
		d := s.depth[j]
		sum += uint64(d)
		most, least = max(most, d), min(least, d)
		if s.loads[i] <= s.bound { // (+Inf: the guard admitted every candidate)
			lowest = min(lowest, s.costs[i])
		}
	}
	dec.RandomMatched = float64(sum) / float64(n)
	switch got := s.depth[s.cands[pick]]; {
	case n == 1:
		dec.Reason = ReasonSingle
	case dec.Diverted:
		dec.Reason = ReasonGuard
	case temperature > 0 && s.costs[pick] != lowest:
		dec.Reason = ReasonSampled
	case got > 0 && got == most && least < most:
		dec.Reason = ReasonCache
	default:
		dec.Reason = ReasonLoad
	}
}

// candidate returns the cost terms of candidate i of s.
func (s *scratch) candidate(ranks []*rank, i int) Candidate {
	rk := ranks[s.cands[i]]
	return Candidate{
		WorkerID: rk.key.ID, DPRank: rk.key.DPRank, Matched: s.depth[s.cands[i]],
		PrefillBlocks: s.terms[i].prefill, DecodeBlocks: s.terms[i].decode, Cost: s.terms[i].cost,
	}
}

// cheapest appends to out the indices of the n cheapest costs: pick first,
// then the others by ascending cost. It keeps a sorted window of n, which is
// cheap for the small n a gateway asks for.
func cheapest(costs []float64, pick, n int, out []int) []int {
	out = append(out, pick)
	if n <= 1 {
		return out
	}
	for i, c := range costs {
		if i == pick {
			continue
		}
		if len(out) == n && c >= costs[out[n-1]] {
			continue
		}
		if len(out) < n {
			out = append(out, i)
		} else {
			out[n-1] = i
		}
		for k := len(out) - 1; k > 1 && costs[out[k]] < costs[out[k-1]]; k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out
}

// endpoint is the serving address of rank dp.
func (w *worker) endpoint(dp uint32) string {
	if int(dp) < len(w.RankEndpoints) && w.RankEndpoints[dp] != "" {
		return w.RankEndpoints[dp]
	}
	return w.Endpoint
}
