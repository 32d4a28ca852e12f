package scoring

import (
	"cmp"
	"math"
	"slices"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Replicas that decide the same burst on the same state choose alike: a
// Route's load reaches the other replicas only after the sync lag, so the
// requests a gateway spreads over them within it would all land on the
// rank that was cheapest before any of them, where one router would have
// seen each choice's load before the next. With Config.Place set (cluster
// mode) and two or more replicas, each replica breaks near-ties toward
// ranks of its own (preferOwn), so replicas deciding at once diverge
// without hearing from each other, and a choice that is clearly cheaper
// (a rank holding the prompt's prefix, a rank far less loaded) stands on
// every replica. (A replica does not price the decisions it cannot see,
// as copies of the request placed before it chooses: their number can
// only be estimated, and over-estimated the copies move requests off their
// cheapest ranks; docs/replicas.md.)

// replicaPlace is this replica's place among the replicas and their
// number: 0 and 1 without Config.Place.
func (r *Router) replicaPlace() (place, replicas int) {
	if r.cfg.Place == nil {
		return 0, 1
	}
	return r.cfg.Place()
}

// preferOwn breaks near-ties toward this replica's own ranks. Ranks are
// dealt out evenly among the replicas, the same on every replica
// (ownerOrder), so among the candidates one router would have treated as
// equal (within this request's own prefill at the pick: what the pick adds
// there for the next request) each replica takes its own, and replicas
// that decide at once diverge without hearing from each other. A pick
// holding the prompt's prefix has a small prefill and keeps the request;
// with no own rank near the pick, the pick stands.
//
// An own rank the bounded-load guard holds back is taken too. Replicas see
// nearly the same loads, so the guard holds back the same ranks on all of
// them, and every replica whose near-equal ranks it held back would take
// the same admitted pick: in a burst, the pile this break is here to
// prevent. The guard bounds what lasts over a window of hundreds of
// Routes; a near-tie moves one request by no more than its own prefill.
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
		if c <= limit && c < lo && int(ord[s.cands[i]])%replicas == place {
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

// ownStep is what the request on rk adds to the next request's cost
// there: its uncached prefill, in the policy's unit (under PolicyTime at
// rk's seconds per token, which cost left in rk's memo): the tolerance
// within which preferOwn treats another rank as equal. The caller holds
// rk's model's lock.
func (r *Router) ownStep(rk *rank, t costTerms, timed bool) float64 {
	uncached := max(0, t.prefill-float64(rk.prefillBlocks))
	if timed {
		return uncached * float64(r.cfg.BlockSize) * rk.timing.spt.value
	}
	return r.cfg.PrefillWeight * uncached
}
