package radix

import "github.com/kvrouter/kvrouter/internal/kv"

// Score is one worker/rank's answer to a Match. It names the worker/rank by
// slot (Index.WorkerOf) rather than by Worker: a match writes one Score per
// worker holding the prompt's first block, a thousand on a large fleet, and
// without the name a Score is 32 bytes instead of 64.
type Score struct {
	// Slot is the worker/rank's dense number in this index, so callers can
	// keep per-worker data in a slice indexed by it. It is stable while the
	// worker/rank is in the index; after RemoveWorker it may be given to
	// another worker/rank, but only once no Match that could report it is
	// running and Config.SlotReuseDelay has passed (see registry): resolve a
	// Score's slot (WorkerOf) right after the Match, and drop a removed
	// worker's per-slot data within that delay.
	Slot uint32
	// Matched is the number of leading prompt blocks the worker holds on any tier.
	Matched uint32
	// ByTier counts matched blocks by the best tier the worker holds them on.
	ByTier [kv.NumTiers]uint32
	// Cached is the number of blocks in the worker/rank's index.
	Cached uint64
}

// Match scores every worker/rank holding the first of blockHashes, named by
// Slot (see WorkerOf): Matched is the number of leading blocks it holds on any
// tier, ByTier splits them by the best tier held, Cached is its index size.
// Scores are appended to out[:0] in worker-slot order; nothing is allocated
// when out has the capacity.
//
// A Match seeds its active workers (see activeSet) with the holders of the
// prompt's first node, walks the prompt node by node (see walk), merging the
// active workers with each holder set that differs from the last, and
// finishes by filling in the scores.
func (ix *Index) Match(blockHashes []uint64, out []Score) []Score {
	out = out[:0]
	if len(blockHashes) == 0 {
		return out
	}
	a := ix.beginMatch() // (before any shard is read: see registry)
	k := pathKey(rootKey, blockHashes[0])
	sh := ix.shards[ix.shardOf(k)]
	sh.mu.RLock()
	id, ok := sh.lookup(rootID, k)
	if !ok {
		sh.mu.RUnlock()
		ix.endMatch(a)
		return out
	}
	set := sh.meta(id).set
	if sh.sets[set].bits.n == 0 { // (a node nobody holds, kept for its children)
		sh.mu.RUnlock()
		ix.endMatch(a)
		return out
	}
	out = a.seed(&sh.sets[set], out)
	d := ix.walk(a, sh, id, k, set, blockHashes, out)
	a.finish(d)
	a.scores(out, ix.reg.slots())
	ix.endMatch(a)
	return out
}

// walk follows blockHashes from the node id at depth 0 (path key k, holder
// set set) in sh, whose read lock the caller holds, merging a's workers (whose
// scores are out) with every holder set that differs from the last one's. It
// returns the depth where the walk stopped (the prompt's end, a block no node
// has, or the last worker leaving), with every shard lock released.
//
// It takes the read lock of one shard at a time, that of the segment it is in
// (see Config.SegmentBlocks), so a Match racing a store sees each segment of
// the run before or after it. Each step is one block: the node after id is
// first looked for at id+1 (see shard.chainedChild), and only when that fails
// is the child map probed. Where the next node points to the same interned
// holder set as the last (the common case along a shared prefix) nobody can
// leave and the step is done; this loop runs once per prompt block, so it
// stays in one function, and everything rarer (a segment's first node, a set
// change) is a call.
func (ix *Index) walk(a *activeSet, sh *shard, id uint32, k uint64, set uint32, blockHashes []uint64, out []Score) uint32 {
	segEnd := ix.segmentEnd(0)
	d := 1
	for ; d < len(blockHashes); d++ {
		k = pathKey(k, blockHashes[d])
		var m *nodeMeta
		if uint64(d) == segEnd {
			segEnd = ix.segmentEnd(uint32(d))
			if sh, id, m = ix.enterSegment(sh, k); m == nil {
				break
			}
			set = noSet // (set ids are the shard's own: merge)
		} else if m = sh.chainedChild(id, k); m != nil {
			id++
		} else if id, m = sh.unchainedChild(id, k); m == nil {
			break
		}
		if m.set == set {
			continue
		}
		set = m.set
		if !a.merge(&sh.sets[set], uint32(d), out) {
			break
		}
	}
	sh.mu.RUnlock()
	return uint32(d)
}

// enterSegment moves a walk from sh to the shard of the segment whose first
// node has path key k, releasing sh's read lock and taking the new shard's,
// and finds that node under the shard's root (nil when there is none).
func (ix *Index) enterSegment(sh *shard, k uint64) (*shard, uint32, *nodeMeta) {
	sh.mu.RUnlock()
	sh = ix.shards[ix.shardOf(k)]
	sh.mu.RLock()
	id, ok := sh.lookup(rootID, k)
	if !ok {
		return sh, 0, nil
	}
	return sh, id, sh.meta(id)
}
