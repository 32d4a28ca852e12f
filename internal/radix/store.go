package radix

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Store attaches blocks, in sequence order, under the node of parent (an engine
// hash on worker w) or under the root when !hasParent, on tier. An unknown
// parent returns ErrParentNotFound; a run that repeats an engine hash or names
// its own parent, or a bad tier, returns ErrInvalid. Either way the store is
// dropped, counted, and the state is untouched. Re-storing a block w already
// holds on tier is idempotent for Match but counted per copy; storing a known
// engine hash under a different prefix moves it there.
func (ix *Index) Store(w kv.WorkerRank, parent uint64, hasParent bool, tier kv.Tier, blocks []kv.Block) error {
	ws := ix.lockWorker(w)
	err := ix.store(ws, parent, hasParent, tier, blocks)
	ws.mu.Unlock()
	ix.checkAfter()
	return err
}

// store is Store under ws's lock. It applies the run one segment at a time
// (see storeSegment), holding one shard lock at a time.
func (ix *Index) store(ws *workerState, parent uint64, hasParent bool, tier kv.Tier, blocks []kv.Block) error {
	if tier >= kv.NumTiers {
		ws.invalid.Add(1)
		return fmt.Errorf("store on %s: tier %d: %w", ws.w, tier, ErrInvalid)
	}
	if len(blocks) == 0 {
		ws.stores.Add(1)
		return nil
	}
	if err := ws.checkRun(parent, hasParent, blocks); err != nil {
		ws.invalid.Add(1)
		return err
	}
	at := runStart{shard: -1, node: rootID, key: rootKey}
	if hasParent {
		var ok bool
		if at, ok = ix.parentStart(ws, parent); !ok {
			ws.parentNotFound.Add(1)
			return fmt.Errorf("store on %s: parent %#x: %w", ws.w, parent, ErrParentNotFound)
		}
	}
	ws.prepareRun(at.key, blocks)
	var dups, full uint64
	for i := 0; i < len(blocks); {
		end, si, under := ix.runSegment(at, ws.keys, i)
		d, f := ix.storeSegment(ws, si, under, at.depth+uint32(i), tier, blocks[i:end], ws.keys[i:end])
		dups += d
		full += f
		// (old bindings in other shards, dropped holding one shard lock at a time)
		for _, b := range ws.moved {
			ix.drop(ws, b)
		}
		ws.moved = ws.moved[:0]
		i = end
	}
	ws.stores.Add(1)
	ws.blocksStored.Add(uint64(len(blocks)) - full)
	ws.dupStore.Add(dups)
	if full > 0 {
		ws.invalid.Add(1)
		return fmt.Errorf("store on %s: %d of %d blocks skipped: their prefix already holds %d of the worker's engine hashes on tier %d: %w",
			ws.w, full, len(blocks), maxHolderCount, tier, ErrInvalid)
	}
	return nil
}

// runStart is where a store run starts: under node (in shard, or -1 for the
// root of whichever shard the run's first segment picks), whose path key is
// key, at depth.
type runStart struct {
	shard int
	node  uint32
	key   uint64
	depth uint32
}

// parentStart returns where a run under engine hash parent of ws starts, or
// false when ws does not know parent.
func (ix *Index) parentStart(ws *workerState, parent uint64) (runStart, bool) {
	v, ok := ws.blocks.get(parent)
	if !ok {
		return runStart{}, false
	}
	b := binding(v)
	at := runStart{shard: b.shard(), node: b.node()}
	sh := ix.shards[at.shard]
	sh.mu.RLock() // (the node is ws's, so it stays; its shard's arrays may move)
	m := sh.meta(at.node)
	at.key, at.depth = m.key, m.depth+1
	sh.mu.RUnlock()
	return at, true
}

// prepareRun sets ws.keys to the path keys of blocks, a run under the node
// whose path key is key, and loads the worker-map line of every block first,
// so that the run's misses there overlap.
func (ws *workerState) prepareRun(key uint64, blocks []kv.Block) {
	keys := ws.keys[:0]
	for _, bl := range blocks {
		key = pathKey(key, bl.BlockHash)
		keys = append(keys, key)
	}
	ws.keys = keys
	var sink uint64
	for _, bl := range blocks {
		sink += ws.blocks.first(bl.EngineHash)
	}
	ws.sink += sink
}

// runSegment returns the end of the segment of a run (starting at at, with
// path keys keys) that holds its block i, and the shard and node that
// segment's blocks from i go under.
func (ix *Index) runSegment(at runStart, keys []uint64, i int) (end, si int, under uint32) {
	d := at.depth + uint32(i)
	end = int(min(uint64(len(keys)), uint64(i)+ix.segmentEnd(d)-uint64(d)))
	if i == 0 && at.shard >= 0 && !ix.segmentStart(d) {
		return end, at.shard, at.node
	}
	return end, ix.shardOf(keys[i]), rootID
}

// storeSegment stores blocks (path keys keys), one segment of a run, as a
// chain under node under of shard si, the first at depth, on tier. It returns
// the duplicate copies and the blocks skipped for maxHolderCount; the old
// bindings of engine hashes that move here from other shards are left in
// ws.moved for the caller to drop.
func (ix *Index) storeSegment(ws *workerState, si int, under, depth uint32, tier kv.Tier, blocks []kv.Block, keys []uint64) (dups, full uint64) {
	sh := ix.shards[si]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// The worker's size is published before the segment's blocks become
	// visible (deferred calls run last first, so before the unlock): a
	// Match reads the size after its walk, so it never finds a worker
	// matching more blocks than it holds.
	defer ws.setCached()
	var memo setMemo
	prev := under
	for i, bl := range blocks {
		id := sh.child(prev, keys[i], depth+uint32(i))
		prev = id
		p, had := ws.blocks.ref(bl.EngineHash)
		b := binding(*p)
		if had && b.shard() != si {
			// The engine hash moves to a prefix in another shard.
			ws.moved = append(ws.moved, b)
			had, b = false, 0
		}
		if had && b.node() == id {
			c := b.copies(tier)
			if c > 0 {
				dups++
			} else if !sh.adjust(id, ws.slot, tierOne(tier, 1), &memo) {
				full++
				continue
			}
			if c < maxCopies {
				c++
			}
			*p = uint64(b.withCopies(tier, c))
			continue
		}
		// Hold the new node before dropping an old binding in this shard, so
		// that freeing the old node can never free the new path.
		if !sh.adjust(id, ws.slot, tierOne(tier, 1), &memo) {
			// maxHolderCount of this worker's engine hashes already hold
			// this prefix on this tier: skip the block (an old binding stays
			// where it was).
			if !had {
				ws.blocks.del(bl.EngineHash)
			}
			full++
			continue
		}
		if had {
			sh.adjust(b.node(), ws.slot, b.holderDelta(), &memo)
		}
		*p = uint64(makeBinding(si, id).withCopies(tier, 1))
	}
	return dups, full
}

// drop drops from the tree every copy of an engine hash of ws bound at b.
func (ix *Index) drop(ws *workerState, b binding) {
	sh := ix.shards[b.shard()]
	sh.mu.Lock()
	var memo setMemo
	sh.adjust(b.node(), ws.slot, b.holderDelta(), &memo)
	sh.mu.Unlock()
}

// checkRun rejects a run that repeats an engine hash or names its own parent.
func (ws *workerState) checkRun(parent uint64, hasParent bool, blocks []kv.Block) error {
	if eh, f := kv.CheckRun(blocks, engineHash, parent, hasParent); f != kv.RunOK {
		return fmt.Errorf("store on %s: engine hash %#x %s: %w", ws.w, eh, f, ErrInvalid)
	}
	return nil
}

func engineHash(b kv.Block) uint64 { return b.EngineHash }
