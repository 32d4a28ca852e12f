package scoring

import (
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
)

// fleetFor is model's learner and guard state, nil without the model.
func (r *Router) fleetFor(model string) *fleetTiming {
	if m := r.states[model]; m != nil {
		return &m.fleet
	}
	return nil
}

// pendingByModel is each model's pending prefills, for the models with any.
func (r *Router) pendingByModel() map[string]int64 {
	out := map[string]int64{}
	for name, m := range r.states {
		if m.pending != 0 {
			out[name] = m.pending
		}
	}
	return out
}

// checkInvariants stops the Router and checks its tables agree: registry,
// model lists, load counters against active requests, the overlay's holders
// against its FIFOs, and the slot cache.
func (r *Router) checkInvariants() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.load.mu.Lock()
	defer r.load.mu.Unlock()
	defer r.lockModels()()
	for _, m := range r.states {
		m.overlay.mu.Lock()
		defer m.overlay.mu.Unlock()
	}
	for _, check := range []func() error{r.checkRegistry, r.checkModels, r.checkLoad, r.checkDigests, r.checkOverlays, r.checkSlotCache} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// registered reports whether rk is the registered rank of its key. The
// caller holds r.mu.
func (r *Router) registered(rk *rank) bool { return r.ranks[rk.key] == rk }

// checkRegistry checks workers, the rank table and the model lists agree.
// The caller holds every lock.
func (r *Router) checkRegistry() error {
	nRanks := 0
	for id, wk := range r.workers {
		if wk.ID != id || len(wk.ranks) != wk.DPSize {
			return fmt.Errorf("worker %q: id %q, %d ranks for dp %d", id, wk.ID, len(wk.ranks), wk.DPSize)
		}
		for _, rk := range wk.ranks {
			if !r.registered(rk) || rk.worker != wk {
				return fmt.Errorf("rank %v of %q not in the rank table", rk.key, id)
			}
			if ms := r.models[wk.Model]; rk.idx >= len(ms) || ms[rk.idx] != rk {
				return fmt.Errorf("rank %v: idx %d does not index model %q's list", rk.key, rk.idx, wk.Model)
			}
			if st := rk.model.overlay.slots[rk.slot]; st == nil || st.rank != rk {
				return fmt.Errorf("rank %v: overlay slot %d belongs to another rank", rk.key, rk.slot)
			}
		}
		nRanks += len(wk.ranks)
	}
	if nRanks != len(r.ranks) {
		return fmt.Errorf("%d ranks in workers, %d in the rank table", nRanks, len(r.ranks))
	}
	inModels := 0
	for _, ms := range r.models {
		inModels += len(ms)
	}
	if inModels != nRanks {
		return fmt.Errorf("%d ranks in model lists, %d registered", inModels, nRanks)
	}
	return nil
}

// checkLoad checks the request list and that each rank's load counters
// (and the time policy's pending prefills) are the sums of its active
// requests. The caller holds every lock.
func (r *Router) checkLoad() error {
	listed := 0
	for q, prev := r.load.head, (*request)(nil); q != nil; prev, q = q, q.next {
		if q.prev != prev || r.load.requests[q.id] != q {
			return fmt.Errorf("request list broken at %q", q.id)
		}
		if q.next == nil && r.load.tail != q {
			return fmt.Errorf("request list tail is not its last request %q", q.id)
		}
		listed++
	}
	if listed != len(r.load.requests) {
		return fmt.Errorf("%d requests listed, %d active", listed, len(r.load.requests))
	}
	type sums struct{ active, prefill, tokens, decode, pending int64 }
	want := map[*rank]*sums{}
	for id, q := range r.load.requests {
		if !r.registered(q.rank) {
			return fmt.Errorf("request %q is active on unregistered rank %v", id, q.rank.key)
		}
		s := want[q.rank]
		if s == nil {
			s = &sums{}
			want[q.rank] = s
		}
		s.active++
		if q.prefillDone {
			s.decode += q.decodeBlocks
		} else {
			s.prefill += q.prefillBlocks
			s.tokens += q.prefillTokens
			s.pending++
		}
	}
	for _, rk := range r.ranks {
		s := want[rk]
		if s == nil {
			s = &sums{}
		}
		if !(rk.routed >= 0) || math.IsInf(rk.routed, 0) {
			return fmt.Errorf("rank %v guard load %v", rk.key, rk.routed)
		}
		if got := (sums{rk.active, rk.prefillBlocks, rk.prefillTokens, rk.decodeBlocks, rk.timing.pending}); got != *s {
			return fmt.Errorf("rank %v load %+v, requests sum to %+v", rk.key, got, *s)
		}
	}
	if err := r.checkBalance(); err != nil {
		return err
	}
	return r.checkPending()
}

// checkBalance checks each model's guard total is its listed ranks' loads
// summed (up to rounding). The caller holds every lock.
func (r *Router) checkBalance() error {
	for m, ranks := range r.models {
		f := r.fleetFor(m)
		sum := 0.0
		for _, rk := range ranks {
			sum += rk.routed
		}
		if math.Abs(sum-f.balance.total) > 1e-9*max(1, sum) {
			return fmt.Errorf("model %q: guard total %v, ranks' loads sum to %v", m, f.balance.total, sum)
		}
	}
	return nil
}

// checkPending checks loadTable.pending is each model's ranks' pending
// prefills summed, and absent for a model without any. The caller holds
// every lock.
func (r *Router) checkPending() error {
	for m, ranks := range r.models {
		sum := int64(0)
		for _, rk := range ranks {
			if rk.unlisted {
				return fmt.Errorf("rank %v of model %q's list is marked unlisted", rk.key, m)
			}
			sum += rk.timing.pending
		}
		if got := r.states[m].pending; got != sum {
			return fmt.Errorf("model %q: %d pending prefills kept, its ranks' sum %d", m, got, sum)
		}
	}
	return nil
}

// checkOverlays checks every model's overlay.
func (r *Router) checkOverlays() error {
	for name, m := range r.states {
		if err := r.checkOverlay(m.overlay); err != nil {
			return fmt.Errorf("model %q: %w", name, err)
		}
	}
	return nil
}

// checkModels checks there is a model state for every model with ranks,
// and only for those, and that every rank points at its model's.
func (r *Router) checkModels() error {
	if len(r.states) != len(r.models) {
		return fmt.Errorf("%d model states for %d models", len(r.states), len(r.models))
	}
	for name, ranks := range r.models {
		m := r.states[name]
		if m == nil || m.name != name {
			return fmt.Errorf("model %q has no state of its own", name)
		}
		for _, rk := range ranks {
			if rk.model != m {
				return fmt.Errorf("rank %v points at another model's state", rk.key)
			}
		}
	}
	return nil
}

// checkDigests checks the per-origin digests are the active requests'
// count and xor, as a scan of them finds.
func (r *Router) checkDigests() error {
	want := map[string]digest{}
	for id, q := range r.load.requests {
		d := want[q.origin]
		d.n++
		d.sum ^= xxhash.Sum64String(id)
		want[q.origin] = d
	}
	if len(want) != len(r.load.digests) {
		return fmt.Errorf("digests for %d origins, requests of %d", len(r.load.digests), len(want))
	}
	for origin, d := range r.load.digests {
		if *d != want[origin] {
			return fmt.Errorf("origin %q: digest %+v, its requests %+v", origin, *d, want[origin])
		}
	}
	if n := r.load.n.Load(); n != int64(len(r.load.requests)) {
		return fmt.Errorf("%d requests counted, %d active", n, len(r.load.requests))
	}
	return nil
}

// checkOverlay checks each slot's FIFO (increasing expiries, its stale count,
// its capacity) against the holders, and that every holder has exactly one
// current FIFO entry. The caller holds every lock.
func (r *Router) checkOverlay(o *overlay) error {
	entries := map[[2]uint64]int{} // (slot, key) -> current FIFO entries
	for slot, st := range o.slots {
		if st == nil {
			continue
		}
		if !r.registered(st.rank) || st.rank.slot != int32(slot) {
			return fmt.Errorf("overlay slot %d held by unregistered rank %v", slot, st.rank.key)
		}
		stale := 0
		last := int64(0)
		for i := 0; i < st.n; i++ {
			e := st.fifo[(st.head+i)%len(st.fifo)]
			if e.expires <= last {
				return fmt.Errorf("slot %d: FIFO expiries not increasing at %d", slot, i)
			}
			last = e.expires
			if o.isCurrent(e, int32(slot)) {
				entries[[2]uint64{uint64(slot), e.key}]++
			} else {
				stale++
			}
		}
		if stale != st.stale {
			return fmt.Errorf("slot %d: %d stale FIFO entries, counted %d", slot, stale, st.stale)
		}
		if live := st.n - st.stale; live > st.capacity || st.n > 2*st.capacity {
			return fmt.Errorf("slot %d: %d live of %d entries over capacity %d", slot, live, st.n, st.capacity)
		}
	}
	for key, hs := range o.keys {
		if len(hs) == 0 {
			return fmt.Errorf("key %x has an empty holder list", key)
		}
		for _, h := range hs {
			if st := o.slots[h.slot]; st == nil {
				return fmt.Errorf("key %x held by freed slot %d", key, h.slot)
			}
			if n := entries[[2]uint64{uint64(h.slot), key}]; n != 1 {
				return fmt.Errorf("key %x on slot %d has %d current FIFO entries, want 1", key, h.slot, n)
			}
		}
	}
	var present [1 << presentBits]uint32
	for key := range o.keys {
		present[keyBucket(key)]++
	}
	if present != *o.present {
		return fmt.Errorf("the overlay's key counts by bucket disagree with its %d keys", len(o.keys))
	}
	return nil
}

// checkSlotCache checks the slot cache names only registered ranks. The
// caller holds r.mu.
func (r *Router) checkSlotCache() error {
	for slot, rk := range r.bySlot {
		if rk != nil && !r.registered(rk) {
			return fmt.Errorf("slot cache %d names unregistered rank %v", slot, rk.key)
		}
	}
	return nil
}
