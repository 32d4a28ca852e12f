package radix

import (
	"cmp"
	"slices"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Clear drops everything w holds, on every tier.
func (ix *Index) Clear(w kv.WorkerRank) {
	if ws := ix.reg.get(w); ws != nil {
		ws.mu.Lock()
		if !ws.dead.Load() {
			ix.clear(ws)
		}
		ws.mu.Unlock()
		ix.checkAfter()
	}
}

// RemoveWorker drops everything held by every rank of worker id, and gives
// back their slots, for later workers/ranks (see registry). Its ranks are
// found by id: it does not visit other workers. A later call for one of the
// ranks starts it afresh, on a new slot.
func (ix *Index) RemoveWorker(id string) {
	for _, ws := range ix.reg.remove(id) {
		ws.mu.Lock()
		ix.clear(ws)
		ws.dead.Store(true)
		ws.mu.Unlock()
		ix.reg.retire(ws)
	}
	ix.checkAfter()
}

// clear is Clear under ws's lock.
func (ix *Index) clear(ws *workerState) {
	if ws.blocks.len() == 0 {
		return
	}
	all := make([]binding, 0, ws.blocks.len())
	ws.blocks.all(func(_, v uint64) { all = append(all, binding(v)) })
	// Group by shard, then node, so each shard is locked once and runs of
	// nodes sharing a holder set hit the memo.
	slices.SortFunc(all, func(a, b binding) int {
		const place = 1<<40 - 1 // shard and node
		return cmp.Compare(a&place, b&place)
	})
	for i := 0; i < len(all); {
		si := all[i].shard()
		sh := ix.shards[si]
		sh.mu.Lock()
		var memo setMemo
		for ; i < len(all) && all[i].shard() == si; i++ {
			sh.adjust(all[i].node(), ws.slot, all[i].holderDelta(), &memo)
		}
		sh.mu.Unlock()
	}
	ws.blocks.reset()
	ws.setCached()
}
