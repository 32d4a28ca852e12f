package radix

import (
	"sync"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// workerState is one worker/rank's view: its engine hashes and where each is
// bound in the tree. Only the worker's own writer touches blocks, under mu.
type workerState struct {
	mu   sync.Mutex
	w    kv.WorkerRank
	slot uint32
	dead atomic.Bool // removed (set under mu, after the last entry of slot left): see registry

	blocks u64map    // engine hash -> binding
	keys   []uint64  // a store run's path keys
	moved  []binding // a store run's old bindings in other shards

	cached *atomic.Uint64 // in the worker's slot entry

	stores, removes, blocksStored, blocksRemoved atomic.Uint64
	parentNotFound, invalid, blockNotFound       atomic.Uint64
	dupStore                                     atomic.Uint64

	sink uint64 // keeps prefetching loads alive
}

// lockWorker returns w's state, made if need be, locked: never a removed one.
func (ix *Index) lockWorker(w kv.WorkerRank) *workerState {
	for {
		ws := ix.reg.getOrCreate(ix, w)
		ws.mu.Lock()
		if !ws.dead.Load() {
			return ws
		}
		ws.mu.Unlock() // (removed since getOrCreate found it: a fresh state is made)
	}
}

// setCached publishes ws's index size to Match (through its slot entry).
func (ws *workerState) setCached() { ws.cached.Store(uint64(ws.blocks.len())) }
