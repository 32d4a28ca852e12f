package radix

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// StoreTier adds a copy on tier to blocks w already holds, named by engine
// hash only. Unknown hashes are counted and ErrBlockNotFound is returned after
// the rest are applied.
func (ix *Index) StoreTier(w kv.WorkerRank, engineHashes []uint64, tier kv.Tier) error {
	ws := ix.lockWorker(w)
	err := ix.update(ws, engineHashes, tier, +1)
	ws.mu.Unlock()
	ix.checkAfter()
	return err
}

// Remove drops one copy of each engine hash from tier. Unknown hashes (or ones
// with no copy on tier) are counted and ErrBlockNotFound is returned after the
// rest are applied. A block with no copy left on any tier leaves w, and a node
// no worker holds (and that has no children) is freed.
func (ix *Index) Remove(w kv.WorkerRank, engineHashes []uint64, tier kv.Tier) error {
	ws := ix.lockWorker(w) // (a worker unknown so far: its misses are counted)
	err := ix.update(ws, engineHashes, tier, -1)
	ws.mu.Unlock()
	ix.checkAfter()
	return err
}

// update adds (dir > 0) or removes one copy on tier for each engine hash. Only
// a tier's first copy added or last copy removed changes the tree; the shards
// those are in are locked one at a time, in the order the hashes come.
func (ix *Index) update(ws *workerState, hashes []uint64, tier kv.Tier, dir int) error {
	if tier >= kv.NumTiers {
		ws.blockNotFound.Add(uint64(len(hashes)))
		return fmt.Errorf("%s on %s: tier %d: %w", updateOp(dir), ws.w, tier, ErrBlockNotFound)
	}
	var sh *shard
	cur := -1
	var memo setMemo
	var n updateCounts
	var sink uint64
	for _, eh := range hashes {
		sink += ws.blocks.first(eh) // overlap the worker-map misses of the batch
	}
	ws.sink += sink
	for i, eh := range hashes {
		p := ws.blocks.find(eh)
		if p == nil || (dir < 0 && binding(*p).copies(tier) == 0) {
			n.missing++
			continue
		}
		n.applied++
		b := binding(*p)
		c := b.copies(tier)
		if dir > 0 {
			if c < maxCopies {
				b = b.withCopies(tier, c+1)
			}
			if c > 0 {
				n.dups++
				*p = uint64(b)
				continue
			}
		} else {
			b = b.withCopies(tier, c-1)
			if c > 1 {
				*p = uint64(b)
				continue
			}
		}
		if b.shard() != cur {
			if sh != nil {
				sh.mu.Unlock()
			}
			cur, sh = b.shard(), ix.shards[b.shard()]
			sh.mu.Lock()
			memo = setMemo{}
			sh.touchUpdates(ws, cur, hashes[i:])
		}
		if !sh.adjust(b.node(), ws.slot, tierOne(tier, int8(dir)), &memo) {
			// A tier copy that would be the prefix's 256th engine hash of
			// this worker on the tier: skipped (only dir > 0 can).
			n.applied--
			n.full++
			continue
		}
		if b.empty() {
			ws.blocks.del(eh)
		} else {
			*p = uint64(b)
		}
	}
	if sh != nil {
		sh.mu.Unlock()
	}
	return ws.countUpdate(dir, tier, len(hashes), n)
}

// updateCounts are what an update did with its engine hashes.
type updateCounts struct {
	missing, applied, dups, full int
}

func updateOp(dir int) string {
	if dir > 0 {
		return "store tier"
	}
	return "remove"
}

// countUpdate adds an update of hashes engine hashes (dir as for update) to
// ws's counters and returns its error.
func (ws *workerState) countUpdate(dir int, tier kv.Tier, hashes int, n updateCounts) error {
	if dir > 0 {
		ws.blocksStored.Add(uint64(n.applied))
		ws.dupStore.Add(uint64(n.dups))
	} else {
		ws.removes.Add(1)
		ws.blocksRemoved.Add(uint64(n.applied))
	}
	ws.setCached()
	if n.missing > 0 {
		ws.blockNotFound.Add(uint64(n.missing))
		return fmt.Errorf("%s on %s: %d of %d engine hashes unknown on tier %d: %w",
			updateOp(dir), ws.w, n.missing, hashes, tier, ErrBlockNotFound)
	}
	if n.full > 0 {
		ws.invalid.Add(1)
		return fmt.Errorf("%s on %s: %d of %d engine hashes skipped: their prefix already holds %d of the worker's engine hashes on tier %d: %w",
			updateOp(dir), ws.w, n.full, hashes, maxHolderCount, tier, ErrInvalid)
	}
	return nil
}

// touchUpdates touches, before a remove (or tier store) batch changes them,
// the nodes bound to the leading engine hashes of ws that lie in this shard
// (si), so that the batch's cache misses overlap instead of coming one after
// another. It stops at the first hash bound elsewhere (so a batch is touched
// once in all) and is only loads: the caller holds the shard's lock and ws's.
func (s *shard) touchUpdates(ws *workerState, si int, hashes []uint64) {
	if len(hashes) < 2 || len(s.chunks) == 0 {
		return
	}
	var sink uint64
	for _, eh := range hashes {
		v, ok := ws.blocks.get(eh)
		if !ok || binding(v).shard() != si {
			break
		}
		sink += s.key(binding(v).node())
	}
	s.sink += sink
}
