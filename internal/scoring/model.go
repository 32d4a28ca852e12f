package scoring

import (
	"sync"
	"sync/atomic"
)

// model is one model's routing state, with a lock of its own: the load
// fields of its ranks (rank), its learner and guard state (fleet), the sum
// of its ranks' pending prefills, the learner's generation, and its overlay
// of predictions (which has its own lock). Routes of different models share
// no lock while they cost and record; Routes of one model take mu to cost
// their candidates and again to record the choice.
//
// A model's state lives from its first worker's AddWorker to its last
// worker's RemoveWorker; the ranks of a removed worker keep pointing at it
// until their requests are released.
type model struct {
	mu    sync.Mutex
	name  string
	fleet fleetTiming
	// pending is rankTiming.pending summed over the model's listed ranks
	// (pending.go).
	pending int64
	// gen is the learner's generation: it changes whenever a learned
	// estimate of the model may have (a sample, the model's rank count), so
	// values computed from the estimates at one generation can be kept
	// until the next (sptMemo). It starts at 1; 0 means none.
	gen uint64

	// owners is the model's ranks' order for replicas' owners (spread.go),
	// built by the first Route that needs it and dropped (under Router.mu
	// for writing) whenever the model's rank list changes.
	owners atomic.Pointer[[]int32]

	overlay *overlay
}

func newModel(name string, rankRates bool) *model {
	return &model{name: name, gen: 1, overlay: newOverlay(), fleet: fleetTiming{rankRates: rankRates}}
}

// modelFor returns name's state, created on its first worker. The caller
// holds r.mu for writing.
func (r *Router) modelFor(name string) *model {
	m, ok := r.states[name]
	if !ok {
		m = newModel(name, r.cfg.RankRates)
		r.states[name] = m
	}
	return m
}

// lockModels locks every model's state, in no particular order: only the
// package's invariant checks lock more than one model, under r.mu's write
// lock, so no two callers can hold some and wait for others.
func (r *Router) lockModels() (unlock func()) {
	ms := make([]*model, 0, len(r.states))
	for _, m := range r.states {
		m.mu.Lock()
		ms = append(ms, m)
	}
	return func() {
		for _, m := range ms {
			m.mu.Unlock()
		}
	}
}
