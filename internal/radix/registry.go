package radix

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// registry hands out a dense slot per worker/rank and takes it back when the
// worker is removed (RemoveWorker), to give it to a later worker/rank.
//
// # Why a reused slot is never reported for its new owner by mistake
//
// Match reports workers by slot, found in holder sets, and maps a slot to
// its worker (WorkerOf, and the index size it reads from the slot entry)
// without locks. A slot s of a removed worker is given to another one only
// when both hold:
//
//  1. No holder set references s: RemoveWorker first clears every rank
//     (under each shard's write lock, every entry of s leaves every set),
//     and marks the worker state dead under its lock, so that no later
//     Store, StoreTier or Remove can add an entry for s (they take a fresh
//     state and slot). Only then is s retired, at epoch E = epoch.Add(1).
//  2. No Match that could have seen s in a set is still running. Every Match
//     stamps its active set with epoch+1 before it reads any shard (see
//     Index.beginMatch) and zeroes the stamp when it is done; one that found
//     every active set busy counts itself in overflow instead. s is reusable
//     once every stamp reads 0 or more than E and overflow reads 0. The
//     atomics are sequentially consistent (one total order), so a Match on
//     a set whose stamp reads 0 either has finished or stores its stamp
//     after that read, itself after the Add; one whose stamp reads more than
//     E loaded the epoch after the Add. Either way its shard reads come after
//     the Add, hence after the clear's unlocks: they see the cleared sets,
//     where s does not appear, and it never reads s's entry. A stamp at most E, or a nonzero overflow, defers the reuse
//     to a later registration (which makes a fresh slot meanwhile). A Match
//     takes microseconds, but may be descheduled for a scheduler tick or
//     more; past SlotReuseDelay (10 s by default) none that old is running.
//
// Between that Match and the caller's WorkerOf lies the caller's own code,
// which no epoch covers: a slot is therefore also kept for reuseDelay
// (Config.SlotReuseDelay) after its retirement. A caller that resolves a
// Score's slot right after the Match, and drops per-slot data of a removed
// worker soon after removing it (as internal/scoring does), never sees a slot
// move to another worker under it.
//
// So the slots made are bounded by the workers registered at once plus those
// removed within SlotReuseDelay (and the rare retirement that was not yet
// quiescent), not by the registrations over the index's life; RemoveWorker
// finds a worker's ranks by id, so it visits only them.
type registry struct {
	mu    sync.Mutex
	byW   sync.Map                  // kv.WorkerRank -> *workerState
	byID  map[string][]*workerState // under mu: each worker id's live ranks
	dir   atomic.Pointer[[]*slotChunk]
	n     uint32    // slots made
	live  int       // under mu: slots with a worker
	free  []retired // under mu: retired slots, oldest first
	seed  uint64    // the worker maps' (see u64map)
	gone  counters  // under mu: the counters of removed workers (for Stats)
	epoch atomic.Uint64

	reuseDelay time.Duration
	now        func() time.Time
}

// retired is a slot given back by a removed worker, at epoch and time at.
type retired struct {
	slot  uint32
	epoch uint64
	at    time.Time
}

// counters are a worker's Stats counters, summed.
type counters struct {
	stores, removes, blocksStored, blocksRemoved uint64
	parentNotFound, invalid, blockNotFound       uint64
	dupStore                                     uint64
}

func (c *counters) add(ws *workerState) {
	c.stores += ws.stores.Load()
	c.removes += ws.removes.Load()
	c.blocksStored += ws.blocksStored.Load()
	c.blocksRemoved += ws.blocksRemoved.Load()
	c.parentNotFound += ws.parentNotFound.Load()
	c.invalid += ws.invalid.Load()
	c.blockNotFound += ws.blockNotFound.Load()
	c.dupStore += ws.dupStore.Load()
}

const slotChunkBits = 10

// A slotEntry holds what Match reports of a worker, densely by slot: its
// identity (set before the slot can appear in any holder set, and changed
// only while no holder set or Match can name the slot: see registry) and its
// index size.
type slotEntry struct {
	ws     atomic.Pointer[workerState]
	cached atomic.Uint64
}

type slotChunk [1 << slotChunkBits]slotEntry

func (r *registry) get(w kv.WorkerRank) *workerState {
	if v, ok := r.byW.Load(w); ok {
		return v.(*workerState)
	}
	return nil
}

func (r *registry) getOrCreate(ix *Index, w kv.WorkerRank) *workerState {
	if ws := r.get(w); ws != nil {
		return ws
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ws := r.get(w); ws != nil {
		return ws
	}
	slot, ok := r.reusable(ix)
	if !ok {
		slot = r.n
		r.n++
	}
	ws := &workerState{w: w, slot: slot}
	ws.blocks.seed = r.seed
	var dir []*slotChunk
	if p := r.dir.Load(); p != nil {
		dir = *p
	}
	if int(slot>>slotChunkBits) == len(dir) {
		nd := make([]*slotChunk, len(dir)+1)
		copy(nd, dir)
		nd[len(dir)] = new(slotChunk)
		dir = nd
		r.dir.Store(&dir)
	}
	e := slotOf(dir, slot)
	ws.cached = &e.cached
	e.ws.Store(ws)
	r.live++
	if r.byID == nil {
		r.byID = make(map[string][]*workerState)
	}
	r.byID[w.ID] = append(r.byID[w.ID], ws)
	r.byW.Store(w, ws)
	return ws
}

// reusable takes the oldest retired slot if it may be given to a new worker
// (see registry), under r.mu.
func (r *registry) reusable(ix *Index) (uint32, bool) {
	if len(r.free) == 0 {
		return 0, false
	}
	old := r.free[0]
	if r.reuseDelay > 0 && r.now().Sub(old.at) < r.reuseDelay {
		return 0, false
	}
	if !ix.quiescentSince(old.epoch) {
		return 0, false // (a fresh slot; this one is tried again next time)
	}
	r.free = r.free[1:]
	if len(r.free) == 0 {
		r.free = nil
	}
	return old.slot, true
}

// remove takes worker id's ranks out of the registry (so that later calls for
// them make fresh states) and returns them.
func (r *registry) remove(id string) []*workerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	wss := r.byID[id]
	delete(r.byID, id)
	for _, ws := range wss {
		r.byW.Delete(ws.w)
	}
	return wss
}

// retire gives back the slot of ws, which is dead and empty: no holder set
// names it.
func (r *registry) retire(ws *workerState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gone.add(ws)
	e := slotOf(r.slots(), ws.slot)
	e.ws.Store(nil)
	e.cached.Store(0)
	r.live--
	at := time.Time{}
	if r.reuseDelay > 0 {
		at = r.now()
	}
	r.free = append(r.free, retired{slot: ws.slot, epoch: r.epoch.Add(1), at: at})
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
	ws := se.ws.Load()
	if ws == nil {
		return kv.WorkerRank{}, false
	}
	return ws.w, true
}

// all returns every live worker state in slot order.
func (r *registry) all() []*workerState {
	r.mu.Lock()
	n, live := r.n, r.live
	r.mu.Unlock()
	dir := r.slots()
	out := make([]*workerState, 0, live)
	for s := uint32(0); s < n; s++ {
		if ws := slotOf(dir, s).ws.Load(); ws != nil {
			out = append(out, ws)
		}
	}
	return out
}

// snapshot returns the removed workers' counters and the live workers, as of
// one moment (so that a worker being removed is counted once).
func (r *registry) snapshot() (counters, []*workerState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	dir := r.slots()
	out := make([]*workerState, 0, r.live)
	for s := uint32(0); s < r.n; s++ {
		if ws := slotOf(dir, s).ws.Load(); ws != nil {
			out = append(out, ws)
		}
	}
	return r.gone, out
}

// beginMatch claims an active set for a Match and stamps it with the epoch
// (see registry), before the Match reads any shard.
func (ix *Index) beginMatch() *activeSet {
	a := ix.getActive()
	if a.pooled {
		a.stamp.Store(ix.reg.epoch.Load() + 1)
	} else {
		ix.overflow.Add(1)
	}
	return a
}

// endMatch releases a Match's active set, once it reads nothing more.
func (ix *Index) endMatch(a *activeSet) {
	if a.pooled {
		a.stamp.Store(0)
		ix.putActive(a)
	} else {
		ix.overflow.Add(-1)
	}
}

// quiescentSince reports whether every Match running now began after
// epoch (see registry).
func (ix *Index) quiescentSince(epoch uint64) bool {
	for i := range ix.active {
		if s := ix.active[i].stamp.Load(); s != 0 && s <= epoch {
			return false
		}
	}
	return ix.overflow.Load() == 0
}
