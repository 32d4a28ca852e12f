package scoring

import (
	"math"
	"slices"
	"strings"
)

// The bounded-load guard, after consistent hashing with bounded loads
// (Mirrokni, Thorup and Zadimoghaddam): a Route's candidates are only the
// ranks whose load stays within BalanceFactor times the model's mean once
// this request is counted, less for a rank that holds little of the prompt.
//
// The load is a rank's recent routed prefill: the prompt blocks of the
// requests routed to it that it did not hold when they were routed, each
// weighted exp(-k / N) where k is how many requests the model has been
// routed since, over a window of
//
//	N = ranks x (2 / (c - 1))^2
//
// requests (no decay for c = 1). Prefill is what queues on an engine that
// schedules its running decodes first and chunks prefills into what is left
// of each step's token budget (vLLM V1, SGLang): a rank that takes more
// than its share of it makes every request behind it wait. The context a
// request finds cached is not counted. It costs the rank no prefill, only
// KV memory and the reads of every decode step, which slow each step a
// little: the time cost prices that (its learned prefill rate falls as the
// rank's decode blocks grow). Bounding it as well would move a session off
// the rank holding its context as the context grows, and the next rank
// prefills all of it again; that re-prefill, not the slower steps, is what
// a long session's first token waits on.
//
// The window is in routed requests, not seconds, so it means the same at
// any request rate and through timing stalls. Its length is set by noise:
// a rank at its fair share gets m = N / ranks of the window's requests,
// give or take sqrt(m) (about Poisson), and the bound c m is 2 sqrt(m)
// above m exactly when m = (2 / (c - 1))^2. So a fairly loaded rank is
// excluded by chance on about one Route in forty, and the guard acts on
// lasting piles; a shorter window makes it act on noise (and move sessions
// off their caches for nothing), a longer one lets a pile last longer.
//
// The bound on a candidate grows with the share of the prompt it holds,
// because that share is what the request loses if the guard sends it
// elsewhere: its next rank prefills it again. Candidate j (load L_j, prompt
// x blocks of which d_j are cached there, model total T over n ranks, mean
// M = (T + x) / n) is admissible when
//
//	L_j <= (1 + (c - 1) (1 + d_j / x) / 2) M
//
// A rank holding the whole prompt is admissible up to c M, the noise band
// of two standard deviations the window is set for; one holding none of it
// up to (1 + c) / 2 x M, one standard deviation. So a request with nothing
// to lose (a new session, a prompt cached nowhere) keeps off a rank that
// is filling, before the rank reaches c M and the guard has to move the
// sessions it holds off their caches; under c M the cost decides as ever.
// With the bound's slack of one request (the mean counts its whole prompt
// x, no less than its prefill on any rank), the
// least-loaded rank is always admissible (L_min <= T/n <= (1 + c)/2 x M for
// c >= 1), so the guard only narrows the choice, and the cost (temperature
// sampling included) decides among the admissible ranks; the Decision
// still lists every candidate under the busy thresholds with its cost
// terms. It falls back to the candidate least over its bound only when busy
// thresholds took out every admissible rank. The bound: a rank ends every
// Route at most c x the mean plus that one request, over the window.
//
// In the pass over the ranks, the test is L_j / (1 + g d_j) <= (1 + c)/2 x M
// with g = (c - 1) / ((1 + c) x) (cachedRelief): one compare for a rank
// that matched nothing, a division more for one that matched.
//
// The decay is forward decay (Cormode et al.): a rank keeps its load in
// units of the model's scale S, which grows by exp(1 / N) per routed
// request; adding a request's p blocks of prefill adds p S, and comparing
// loads of one model needs no per-rank exponential. The model's total is
// kept as loads are added (and ranks leave), so costCandidates compares each candidate's load with the
// bound in its pass over the ranks, and only a Route that finds a rank over
// it makes a second pass, over the candidates' loads.

// balanceState is a model's guard state. Guarded by model.mu.
type balanceState struct {
	scale float64 // S: loads are in units of it (0: no request yet)
	grow  float64 // exp(1 / N) for the model's ranks at the last Route
	total float64 // the loads of the model's listed ranks, summed
}

// maxScale bounds S before the model's loads are rescaled to S = 1.
const maxScale = 1e100

// window sets grow for n ranks and factor c.
func (s *balanceState) window(n int, c float64) {
	if s.scale == 0 {
		s.scale = 1
	}
	s.grow = 1
	if c > 1 {
		s.grow = math.Exp((c - 1) * (c - 1) / (4 * float64(n)))
	}
}

// rescale brings the loads of ranks (a model's list) back to scale 1 once
// the scale grows large: rare, O(ranks). The caller holds model.mu.
func (s *balanceState) rescale(ranks []*rank) {
	if s.scale < maxScale {
		return
	}
	for _, rk := range ranks {
		rk.routed /= s.scale
	}
	s.total /= s.scale
	s.scale = 1
}

// routedAdded counts q's prefill (the prompt blocks its rank did not hold)
// on the rank's load. The caller holds m.mu.
func (m *model) routedAdded(q *request) {
	b := &m.fleet.balance
	if b.scale == 0 { // (a remote request before any Route here)
		b.scale, b.grow = 1, 1
	}
	b.scale *= b.grow
	w := float64(q.prefillBlocks) * b.scale
	q.rank.routed += w
	if !q.rank.unlisted {
		b.total += w
	}
}

// bound is the largest load admissible for a prompt of x blocks over n
// ranks on a rank that holds none of it, (1 + c) / 2 x the mean (+Inf with
// the guard off). The caller holds the model's lock.
func (r *Router) bound(b *balanceState, n int, x float64) float64 {
	if r.cfg.DisableBalance {
		return math.Inf(1)
	}
	return (1 + r.cfg.BalanceFactor) / 2 * (b.total + x*b.scale) / float64(n)
}

// cachedRelief is g for a prompt of x blocks: a rank holding d of them is
// admissible while its load / (1 + g d) is within bound.
func (r *Router) cachedRelief(x float64) float64 {
	c := r.cfg.BalanceFactor
	return (c - 1) / ((1 + c) * max(x, 1))
}

// admit sets s.bound, the largest load choose takes a candidate at: bound,
// or when every candidate is over it (only when busy thresholds excluded
// every admissible rank) the least candidate load (s.loads are relieved by
// the cached prefix, so that is the candidate least over its own bound).
// costCandidates calls it only when some candidate is over bound; otherwise
// s.bound is +Inf and choose does not look at loads.
func (s *scratch) admit(bound float64) {
	least := math.Inf(1)
	for _, l := range s.loads {
		if l < least {
			least = l
		}
	}
	s.bound = max(bound, least)
}

// diversion reports in dec whether the guard excluded the cheapest
// candidate, and what that cost the request picked: the blocks of the
// prompt the cheapest holds beyond the pick's.
func (s *scratch) diversion(dec *Decision, pick int) {
	if math.IsInf(s.bound, 1) || s.loads[s.lowest] <= s.bound {
		return
	}
	dec.Diverted = true
	if lo, got := s.depth[s.cands[s.lowest]], s.depth[s.cands[pick]]; lo > got {
		dec.DivertedBlocks = lo - got
	}
}

// chooseAdmitted picks a candidate (an index into s.cands) among those admit
// admitted.
func (r *Router) chooseAdmitted(s *scratch, temperature float64) int {
	if math.IsInf(s.bound, 1) {
		return r.choose(s.costs, temperature, nil, 0)
	}
	return r.choose(s.costs, temperature, s.loads, s.bound)
}

// balanceOf returns m's guard state, its window set for its n ranks. The
// caller holds m.mu.
func (r *Router) balanceOf(m *model, ranks []*rank) *balanceState {
	m.fleet.balance.window(len(ranks), r.cfg.BalanceFactor)
	m.fleet.balance.rescale(ranks)
	return &m.fleet.balance
}

// Imbalance is one model's load imbalance across its ranks.
type Imbalance struct {
	Model string
	// Ratio is the largest rank's recent routed prefill (the guard's load,
	// whether or not the guard is on) over the mean of the model's ranks: 1
	// is even, BalanceFactor is where the guard holds a rank. 0 before the
	// model's first Route.
	Ratio float64
}

// Imbalances reports every model's load imbalance, by model name.
func (r *Router) Imbalances() []Imbalance {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Imbalance, 0, len(r.models))
	for name, ranks := range r.models {
		m := ranks[0].model
		m.mu.Lock()
		out = append(out, Imbalance{Model: name, Ratio: imbalanceOf(ranks)})
		m.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Imbalance) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// imbalanceOf is the largest load of ranks over their mean (0: no load).
// The caller holds their model's lock.
func imbalanceOf(ranks []*rank) float64 {
	most, total := 0.0, 0.0
	for _, rk := range ranks {
		most, total = max(most, rk.routed), total+rk.routed
	}
	if total <= 0 {
		return 0
	}
	return most * float64(len(ranks)) / total
}
