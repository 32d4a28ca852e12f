package scoring

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// Worker is a registered worker as scoring sees it.
type Worker struct {
	ID       string
	Model    string
	Endpoint string
	// DPSize is the number of data-parallel ranks (0 means 1).
	DPSize int
	// RankEndpoints, when set, is each rank's serving address, which a
	// decision for that rank names instead of Endpoint.
	RankEndpoints []string
	// Approximate marks a worker without KV events: it is routed from the
	// router's own predictions alone.
	Approximate bool
}

type worker struct {
	Worker
	ranks []*rank
}

// rank is one data-parallel rank of a worker: the unit that is scored,
// chosen, loaded and predicted.
//
// A Route reads every rank of its model (evaluate, costCandidates), so what
// it reads for a rank that matched nothing and has no pending prefill comes
// first and fits in the rank's first 64 bytes, one cache line (a rank is in
// the 256-byte size class, whose objects are 256-aligned): idx, the load the
// cost and the guard read, and the start of timing (pending and the seconds
// per token memo). TestRankLayout checks it.
type rank struct {
	idx int // position in its model's rank list; guarded by Router.mu

	// Guarded by model.mu.
	prefillBlocks int64
	decodeBlocks  int64
	routed        float64 // the bounded-load guard's load, in its model's scale (balance.go)
	timing        rankTiming
	prefillTokens int64
	active        int64
	unlisted      bool // off its model's list (RemoveWorker): not in loadTable.pending
	approximate   bool // (set once; here it fills unlisted's padding)

	key    kv.WorkerRank
	worker *worker
	model  *model
	slot   int32 // its model's overlay slot
	// handle is the rank's index entry, once seen (indexCached).
	handle atomic.Pointer[radix.Handle]
}

// indexCached is the index's size of rk (radix.Index.Cached) through the
// rank's handle, found once: costing every rank of a model on every Route
// then reads each size with one atomic load instead of a lookup by id.
func (r *Router) indexCached(rk *rank) uint64 {
	if h := rk.handle.Load(); h != nil {
		if n, ok := h.Cached(); ok {
			return n
		}
	}
	h, ok := r.cfg.Index.Handle(rk.key)
	if !ok {
		return 0
	}
	rk.handle.Store(&h)
	n, _ := h.Cached()
	return n
}

// AddWorker makes w a candidate for its model.
func (r *Router) AddWorker(w Worker) error {
	if w.ID == "" {
		return fmt.Errorf("%w: worker_id is empty", ErrInvalidArgument)
	}
	if w.Model == "" {
		return fmt.Errorf("%w: model is empty", ErrInvalidArgument)
	}
	if w.DPSize <= 0 {
		w.DPSize = 1
	}
	if w.DPSize > kv.MaxDPSize {
		return limitError(LimitDPSize, ErrInvalidArgument, "worker.dp_size %d is over the limit of %d", w.DPSize, kv.MaxDPSize)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.workers[w.ID]; ok {
		return fmt.Errorf("%w: worker_id %q is already registered", ErrAlreadyExists, w.ID)
	}
	if len(r.workers) >= r.cfg.MaxWorkers {
		return limitError(LimitWorkers, ErrResourceExhausted, "worker %q not registered: %d workers are registered, the limit (--max-workers)", w.ID, len(r.workers))
	}
	w.RankEndpoints = slices.Clone(w.RankEndpoints)
	wk := &worker{Worker: w}
	m := r.modelFor(w.Model)
	for i := 0; i < w.DPSize; i++ {
		capacity, ttl := r.cfg.PredictionCapacity, r.cfg.PredictionTTL
		if w.Approximate {
			capacity, ttl = r.cfg.ApproxCapacity, r.cfg.approxTTL
		}
		rk := &rank{
			key:         kv.WorkerRank{ID: w.ID, DPRank: uint32(i)},
			worker:      wk,
			model:       m,
			approximate: w.Approximate,
		}
		m.overlay.addRank(rk, capacity, ttl)
		wk.ranks = append(wk.ranks, rk)
		r.ranks[rk.key] = rk
		rk.idx = len(r.models[w.Model])
		// Copy on write: readers may hold the old slice.
		r.models[w.Model] = append(slices.Clip(r.models[w.Model]), rk)
	}
	m.owners.Store(nil) // (spread.go: dealt again when next needed)
	r.workers[w.ID] = wk
	return nil
}

// RemoveWorker drops a worker, its predictions and its active requests.
func (r *Router) RemoveWorker(id string) {
	wk, ok := r.unregister(id)
	if !ok {
		return
	}
	for _, rk := range wk.ranks {
		rk.model.overlay.removeRank(rk.slot)
	}
	r.load.dropWorker(wk)
}

// unregister is RemoveWorker's part under r.mu: the worker leaves the
// registry, its model's list and the slot cache, so no Route chooses it.
// The model's state goes with its last worker.
func (r *Router) unregister(id string) (wk *worker, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if wk, ok = r.workers[id]; !ok {
		return nil, false
	}
	delete(r.workers, id)
	ms := r.models[wk.Model]
	ms = slices.DeleteFunc(slices.Clone(ms), func(rk *rank) bool { return rk.worker == wk })
	if len(ms) == 0 {
		delete(r.models, wk.Model)
		delete(r.states, wk.Model)
	} else {
		r.models[wk.Model] = ms
		for j, rk := range ms {
			rk.idx = j
		}
		wk.ranks[0].model.owners.Store(nil)
	}
	for _, rk := range wk.ranks {
		delete(r.ranks, rk.key)
	}
	wk.ranks[0].model.unlist(wk.ranks) // (with the model list, under r.mu: a Route sees both or neither)
	for i, rk := range r.bySlot {
		if rk != nil && rk.worker == wk {
			r.bySlot[i] = nil
		}
	}
	return wk, true
}

// slotRank is an index slot whose rank evaluate had to look up in the rank
// table; learnSlots adds it to the slot cache.
type slotRank struct {
	slot uint32
	rank *rank
}

// learnSlots records slot -> rank pairs that evaluate missed. It takes the
// write lock, so evaluate's callers call it after releasing their read lock.
func (r *Router) learnSlots(missed []slotRank) {
	if len(missed) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range missed {
		if r.ranks[m.rank.key] != m.rank {
			continue // removed meanwhile
		}
		if int(m.slot) >= len(r.bySlot) {
			r.bySlot = append(r.bySlot, make([]*rank, int(m.slot)+1-len(r.bySlot))...)
		}
		r.bySlot[m.slot] = m.rank
	}
}
