package ingest

// The rank's side of inexactness and capacity (capacity.go): the applier
// marks the rank inexact when the sequence state machine says so, exact
// again when it is cleared, learns the capacity while exact and trims an
// inexact rank's claims to it after each batch.

// markInexact records that batches from seq on were lost; a rank already
// inexact keeps its first seq.
func (r *rank) markInexact(seq uint64) {
	if r.inexact.Load() {
		return
	}
	r.inexactSince.Store(seq)
	r.inexact.Store(true)
	r.log.Warn("kv events: worker rank inexact: blocks kept, some may be gone from the engine",
		"since_seq", seq, "cached_blocks", r.sink.cached(), "capacity_blocks", r.capBlocks.Load())
	if b, ok := r.sink.(bounder); ok {
		b.track(true)
	}
	r.bound()
}

// markExact records that the rank holds exactly what the engine reported
// since it was cleared (by the router or the engine).
func (r *rank) markExact() {
	if !r.inexact.Swap(false) {
		return
	}
	r.inexactSince.Store(0)
	if b, ok := r.sink.(bounder); ok {
		b.track(false)
	}
	r.log.Info("kv events: worker rank exact again (cleared)")
}

// bound learns the capacity from an exact rank, or trims an inexact one to
// it.
func (r *rank) bound() {
	if !r.inexact.Load() {
		if r.capFixed == 0 {
			if n := r.sink.cached(); n > r.capBlocks.Load() {
				r.capBlocks.Store(n)
			}
		}
		return
	}
	limit := r.capBlocks.Load()
	b, ok := r.sink.(bounder)
	if limit == 0 || !ok {
		return
	}
	if n := b.trim(limit); n > 0 {
		r.evictions.Add(n)
		if r.logLimit.allow() {
			r.log.Warn("kv events: inexact worker rank over its capacity: oldest claims dropped",
				"dropped", n, "capacity_blocks", limit)
		}
	}
}
