package scoring

import (
	"cmp"
	"math"
	"slices"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Replicas that decide the same burst on the same state choose alike: a
// Route's load reaches the other replicas only after the sync lag, so the
// requests a gateway spreads over them within it all land on the rank that
// was cheapest before any of them, where one router would have seen each
// choice's load before the next. With Config.Place set (cluster mode), a
// replica prices the choices it cannot see before deciding, as copies of
// this request placed greedily: each copy goes to the cheapest candidate
// and raises its cost by the request's own prefill there (what a copy's
// uncached work adds to the next request's wait), and the request then
// takes the cheapest. The copies are the decisions the other replicas made
// since this replica last heard from them, estimated from its own: k Routes
// here since the last remote Route arrived stand for (replicas - 1) x k
// there, and of a burst's first requests, one per replica, this replica's
// place among them orders them. A rank that holds the prompt's prefix
// prices a copy at its small uncached part and keeps the request; ranks
// within a copy's prefill of each other share the burst as one router
// would have shared it.

// claimUnseen is the number of other replicas' decisions a Route about to
// choose may not see: place + (replicas - 1) x this replica's Routes
// begun since the last remote Route applied, this one then counted among
// them. Counted as Routes begin, not as they record, so that Routes this
// replica serves at once (which cost before either records) are told apart
// too. 0 without Config.Place or with one replica. It returns the place
// and the number of replicas too (replicas 1 without Config.Place).
func (r *Router) claimUnseen() (unseen, place, replicas int) {
	if r.cfg.Place == nil {
		return 0, 0, 1
	}
	place, n := r.cfg.Place()
	k := r.ownSinceRemote.Add(1) - 1
	if n < 2 {
		return 0, place, n
	}
	return place + (n-1)*int(k), place, n
}

// preferOwn breaks near-ties toward this replica's own ranks. The count of
// unseen decisions is an estimate: Routes that take milliseconds and
// changes that arrive in batches leave replicas deciding at once with
// counts that do not interleave, and then they choose alike. Ranks are
// dealt out evenly among the replicas, the same on every replica
// (ownerOrder), so among the candidates one router would have treated as
// equal (within this request's own prefill at the pick: what the pick adds
// there for the next request) each replica takes its own, and replicas
// that decide at once diverge without hearing from each other. A pick
// holding the prompt's prefix has a small prefill and keeps the request;
// with no own rank near the pick, the pick stands.
func (s *scratch) preferOwn(ranks []*rank, pick, place, replicas int) int {
	if len(s.ownSteps) != len(s.costs) {
		return pick
	}
	ord := ownerOrder(ranks)
	if int(ord[s.cands[pick]])%replicas == place {
		return pick
	}
	limit := s.costs[pick] + s.ownSteps[pick]
	best, lo := pick, math.Inf(1)
	for i, c := range s.costs {
		if c <= limit && c < lo && int(ord[s.cands[i]])%replicas == place &&
			(math.IsInf(s.bound, 1) || s.loads[i] <= s.bound) {
			best, lo = i, c
		}
	}
	return best
}

// ownerOrder is the place of each of a model's ranks (by its index in
// ranks, the model's list) in the order of a hash of their keys, ties by
// key; the owner of a rank among n replicas is its place modulo n. The
// ranks are so dealt out in turn: every replica owns as many as any other,
// give or take one, and every replica with the same ranks registered
// computes the same owners, whatever order they were registered in. (A
// hash of each key modulo the replicas would be the same everywhere too,
// but uneven on a small fleet: all four ranks of one may fall to one of
// three replicas, and a replica owning few ranks rarely has one near its
// pick.) Replicas that briefly disagree on the set (a worker registered on
// one and not yet on another) only break some near-ties alike. It is
// built once per change of the list, by the first Route that needs it
// (O(n log n): a registration does not pay it, so registering a large
// fleet stays linear per worker); the caller holds Router.mu for reading,
// and a writer that changes the list drops it.
func ownerOrder(ranks []*rank) []int32 {
	m := ranks[0].model
	if p := m.owners.Load(); p != nil && len(*p) == len(ranks) {
		return *p
	}
	type keyed struct {
		h   uint64
		idx int
	}
	sorted := make([]keyed, len(ranks))
	for i, rk := range ranks {
		sorted[i] = keyed{keyHash(rk.key), i}
	}
	slices.SortFunc(sorted, func(a, b keyed) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		ka, kb := ranks[a.idx].key, ranks[b.idx].key
		if c := cmp.Compare(ka.ID, kb.ID); c != 0 {
			return c
		}
		return cmp.Compare(ka.DPRank, kb.DPRank)
	})
	ord := make([]int32, len(ranks))
	for place, k := range sorted {
		ord[k.idx] = int32(place)
	}
	m.owners.Store(&ord)
	return ord
}

// keyHash is FNV-1a of the worker id and the data-parallel rank, its high
// bits folded down (FNV's low bits mix poorly for short keys).
func keyHash(k kv.WorkerRank) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(k.ID); i++ {
		h = (h ^ uint64(k.ID[i])) * 1099511628211
	}
	h = (h ^ uint64(k.DPRank)) * 1099511628211
	return h ^ h>>29
}

// spreadCosts adds to s.costs the unseen decisions' copies (at most
// candidates^2: more would cost a Route time without changing where
// near-equal ranks stand). A copy stands for another request, whose
// prompt this replica does not know: it goes where a prompt of this size
// holding nothing costs least (s.blind), not where this prompt's cached
// prefix draws it, for a copy placed by this prompt's own costs pushes the
// request off its cheapest rank onto the one the other request chose.
// Each copy raises both costs of its rank by its prefill there (steps).
// Only admitted candidates take copies, and the copies count on the
// bounded-load guard as the Routes they stand for would (on the rank's
// load as a copy sees it and as this request sees it, and s.guardStep on
// the bound), so a guard that admits one rank does not send the whole
// burst there.
func spreadCosts(s *scratch, unseen int) {
	costs, blind, steps := s.costs, s.blind, s.steps
	guarded := len(s.copyLoads) == len(costs) && len(s.loads) == len(costs) && !math.IsInf(s.guard, 1)
	bound := s.guard
	admitted := func(i int) bool {
		if !guarded {
			return s.loads == nil || math.IsInf(s.bound, 1) || s.loads[i] <= s.bound
		}
		return s.blindLoads[i] <= bound
	}
	for range min(unseen, len(costs)*len(costs)) {
		if guarded {
			bound = max(bound, slices.Min(s.blindLoads)) // (admit's fallback)
		}
		pick, lo := -1, math.Inf(1)
		for i, c := range blind {
			if c < lo && admitted(i) {
				pick, lo = i, c
			}
		}
		if pick < 0 || (steps[pick] <= 0 && !guarded) {
			break // the cheapest takes copies for free: it stays the cheapest
		}
		costs[pick] += steps[pick]
		blind[pick] += steps[pick]
		if guarded {
			s.loads[pick] += s.copyLoads[pick]
			s.blindLoads[pick] += s.blindStep
			bound += s.guardStep
		}
	}
	if guarded {
		s.bound = math.Inf(1)
		if slices.Max(s.loads) > bound {
			s.bound = max(bound, slices.Min(s.loads))
		}
	}
}

// copyCost is what one more copy of the request on rk adds to the next
// request's cost there: its uncached prefill, in the policy's unit (under
// PolicyTime at rk's seconds per token, which cost left in rk's memo). The
// caller holds rk's model's lock.
func (r *Router) copyCost(rk *rank, t costTerms, timed bool) float64 {
	uncached := max(0, t.prefill-float64(rk.prefillBlocks))
	if timed {
		return uncached * float64(r.cfg.BlockSize) * rk.timing.spt.value
	}
	return r.cfg.PrefillWeight * uncached
}
