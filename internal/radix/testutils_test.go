package radix

import (
	"runtime"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// rootShard is the shard of the segment that starts with block hash h.
func (ix *Index) rootShard(h uint64) int { return ix.shardOf(pathKey(rootKey, h)) }

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// fillWorkers stores, for each worker, runs of 16 blocks under shared and
// private prefixes, and returns each worker's engine hashes in store order.
func fillWorkers(t *testing.T, ix *Index, workers []kv.WorkerRank, runs int) [][]uint64 {
	t.Helper()
	hashes := make([][]uint64, len(workers))
	for wi, w := range workers {
		eh := uint64(wi) << 40
		for r := range runs {
			var blocks []kv.Block
			for b := range 16 {
				eh++
				// Half the runs share a prefix across workers.
				bh := uint64(r)<<20 | uint64(b)
				if r%2 == 1 {
					bh |= uint64(wi+1) << 32
				}
				blocks = append(blocks, kv.Block{EngineHash: eh, BlockHash: bh})
			}
			if err := ix.Store(w, 0, false, kv.TierDevice, blocks); err != nil {
				t.Fatal(err)
			}
			for _, b := range blocks {
				hashes[wi] = append(hashes[wi], b.EngineHash)
			}
		}
	}
	return hashes
}

func blocksOfRun(r int) []uint64 {
	var out []uint64
	for b := range 16 {
		out = append(out, uint64(r)<<20|uint64(b))
	}
	return out
}

// holds reports whether w holds engine hash eh with a copy on tier t.
func (ix *Index) holds(w kv.WorkerRank, eh uint64, t kv.Tier) bool {
	ws := ix.reg.get(w)
	if ws == nil {
		return false
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	v, ok := ws.blocks.get(eh)
	return ok && binding(v).copies(t) > 0
}
