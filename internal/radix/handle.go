package radix

import "github.com/kvrouter/kvrouter/internal/kv"

// Handle is a worker/rank's entry in the index, for a caller that asks its
// size on every call (a router costing every rank of a model): its Cached
// is one atomic load, where Index.Cached looks the worker/rank up by id.
type Handle struct{ ws *workerState }

// Handle returns w's handle, or false while w holds no entry (it has stored
// nothing yet, or was removed).
func (ix *Index) Handle(w kv.WorkerRank) (Handle, bool) {
	ws := ix.reg.get(w)
	if ws == nil || ws.dead.Load() {
		return Handle{}, false
	}
	return Handle{ws: ws}, true
}

// Cached is Index.Cached of the handle's worker/rank, or false once that
// entry was removed: a later entry of the same worker/rank (stored again
// after RemoveWorker) has a new Handle.
func (h Handle) Cached() (uint64, bool) {
	if h.ws == nil {
		return 0, false
	}
	n := h.ws.cached.Load()
	if h.ws.dead.Load() { // (n may be the slot's next owner's)
		return 0, false
	}
	return n, true
}
