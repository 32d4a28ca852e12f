package radix

import (
	"sync"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// registry hands out a dense slot per worker/rank. Slots are never reused, so a
// Match may map a slot found in a holder set to its worker without locks.
type registry struct {
	mu   sync.Mutex
	byW  sync.Map // kv.WorkerRank -> *workerState
	dir  atomic.Pointer[[]*slotChunk]
	n    uint32
	seed uint64 // the worker maps' (see u64map)
}

const slotChunkBits = 10

// A slotEntry holds what Match reports of a worker, densely by slot: its
// identity (set once, before the slot can appear in any holder set) and its
// index size.
type slotEntry struct {
	ws     atomic.Pointer[workerState]
	w      kv.WorkerRank
	cached atomic.Uint64
}

type slotChunk [1 << slotChunkBits]slotEntry

func (r *registry) get(w kv.WorkerRank) *workerState {
	if v, ok := r.byW.Load(w); ok {
		return v.(*workerState)
	}
	return nil
}

func (r *registry) getOrCreate(w kv.WorkerRank) *workerState {
	if ws := r.get(w); ws != nil {
		return ws
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ws := r.get(w); ws != nil {
		return ws
	}
	ws := &workerState{w: w, slot: r.n}
	ws.blocks.seed = r.seed
	var dir []*slotChunk
	if p := r.dir.Load(); p != nil {
		dir = *p
	}
	if int(ws.slot>>slotChunkBits) == len(dir) {
		nd := make([]*slotChunk, len(dir)+1)
		copy(nd, dir)
		nd[len(dir)] = new(slotChunk)
		dir = nd
		r.dir.Store(&dir)
	}
	e := slotOf(dir, ws.slot)
	e.w = w
	ws.cached = &e.cached
	e.ws.Store(ws)
	r.n++
	r.byW.Store(w, ws)
	return ws
}

// slots returns a snapshot of the slot directory, for slotOf.
func (r *registry) slots() []*slotChunk {
	if p := r.dir.Load(); p != nil {
		return *p
	}
	return nil
}

func slotOf(dir []*slotChunk, slot uint32) *slotEntry {
	return &dir[slot>>slotChunkBits][slot&(1<<slotChunkBits-1)]
}

// WorkerOf returns the worker/rank that has slot (see Score.Slot), or false
// when no worker/rank has it. It takes no lock.
func (ix *Index) WorkerOf(slot uint32) (kv.WorkerRank, bool) {
	dir := ix.reg.slots()
	if int(slot>>slotChunkBits) >= len(dir) {
		return kv.WorkerRank{}, false
	}
	se := slotOf(dir, slot)
	if se.ws.Load() == nil { // (se.w is stored before se.ws)
		return kv.WorkerRank{}, false
	}
	return se.w, true
}

// all returns every worker state in slot order.
func (r *registry) all() []*workerState {
	r.mu.Lock()
	n := r.n
	r.mu.Unlock()
	dir := r.slots()
	out := make([]*workerState, 0, n)
	for s := uint32(0); s < n; s++ {
		out = append(out, slotOf(dir, s).ws.Load())
	}
	return out
}
