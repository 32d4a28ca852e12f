package radix

import (
	"cmp"
	"fmt"
	"math/bits"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Config configures an Index.
type Config struct {
	// Shards is the number of shards, rounded up to a power of two and capped
	// at MaxShards; 0 means DefaultShards.
	Shards int
	// SegmentBlocks sets where the index cuts a path into segments, each
	// kept in the shard its first node's path key picks: a segment starts at
	// the root and at SegmentBlocks times each power of two blocks deep (64,
	// 128, 256, 512, ... for the default). 0 means DefaultSegmentBlocks.
	SegmentBlocks int
	// CheckInvariants runs the expensive consistency check after every
	// mutating call and panics on a violation. For tests.
	CheckInvariants bool
}

// Shard counts and the default segment length.
const (
	DefaultShards        = 64
	MaxShards            = 256
	DefaultSegmentBlocks = 64
)

// Stats are the index's counters.
type Stats struct {
	Stores         uint64 // Store calls applied
	Removes        uint64 // Remove calls
	BlocksStored   uint64 // blocks of applied Stores and StoreTiers
	BlocksRemoved  uint64 // tier copies removed
	ParentNotFound uint64 // Stores dropped for an unknown parent
	Invalid        uint64 // Stores dropped as invalid
	BlockNotFound  uint64 // unknown engine hashes in StoreTier and Remove
	DuplicateStore uint64 // stores of a copy the worker already held
	Nodes          uint64 // live tree nodes
	Residencies    uint64 // (block, worker/rank) pairs
}

// Index is a sharded radix index of the KV blocks cached by each worker/rank.
// All methods are safe for concurrent use; the calls for one worker/rank are
// expected from one goroutine at a time, in event order.
type Index struct {
	cfg    Config
	shards []*shard
	shift  uint   // 64 - log2(len(shards))
	seg    uint32 // Config.SegmentBlocks
	reg    registry

	scratch     []matchScratch
	scratchHint atomic.Uint32
}

// New returns an empty index.
func New(cfg Config) *Index {
	n := cfg.Shards
	if n <= 0 {
		n = DefaultShards
	}
	if n > MaxShards {
		n = MaxShards
	}
	lg := bits.Len(uint(n - 1))
	n = 1 << lg
	seg := cfg.SegmentBlocks
	if seg <= 0 {
		seg = DefaultSegmentBlocks
	}
	ix := &Index{cfg: cfg, shards: make([]*shard, n), shift: uint(64 - lg), seg: uint32(seg)}
	for i := range ix.shards {
		ix.shards[i] = newShard()
	}
	ix.scratch = make([]matchScratch, max(8, 4*runtime.GOMAXPROCS(0)))
	return ix
}

// shardOf picks the shard of a segment by the path key of its first node.
//
// Sharding by segment rather than by a prompt's first block keeps writers
// apart when every prompt starts alike (one chat template or system prompt,
// which would put the whole index in one shard): only the segments inside
// such a shared prefix share a shard, and their nodes are the popular ones,
// rarely stored or evicted.
func (ix *Index) shardOf(k uint64) int {
	if ix.shift == 64 {
		return 0
	}
	return int(fmix64(k^0x2545f4914f6cdd1d) >> ix.shift)
}

// segmentEnd returns the depth at which the segment holding depth d ends:
// where the next one starts (see Config.SegmentBlocks).
func (ix *Index) segmentEnd(d uint32) uint64 {
	return uint64(ix.seg) << bits.Len32(d/ix.seg)
}

// segmentStart reports whether a segment starts at depth d.
func (ix *Index) segmentStart(d uint32) bool {
	return d == 0 || ix.segmentEnd(d-1) == uint64(d)
}

// Store attaches blocks, in sequence order, under the node of parent (an engine
// hash on worker w) or under the root when !hasParent, on tier. An unknown
// parent returns ErrParentNotFound; a run that repeats an engine hash or names
// its own parent, or a bad tier, returns ErrInvalid. Either way the store is
// dropped, counted, and the state is untouched. Re-storing a block w already
// holds on tier is idempotent for Match but counted per copy; storing a known
// engine hash under a different prefix moves it there.
func (ix *Index) Store(w kv.WorkerRank, parent uint64, hasParent bool, tier kv.Tier, blocks []kv.Block) error {
	ws := ix.reg.getOrCreate(w)
	ws.mu.Lock()
	err := ix.store(ws, parent, hasParent, tier, blocks)
	ws.mu.Unlock()
	ix.checkAfter()
	return err
}

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
	// Where the run starts: under parent's node (its shard, key and depth)
	// or under the root.
	psi, pnode, pkey, depth := -1, uint32(rootID), uint64(rootKey), uint32(0)
	if hasParent {
		v, ok := ws.blocks.get(parent)
		if !ok {
			ws.parentNotFound.Add(1)
			return fmt.Errorf("store on %s: parent %#x: %w", ws.w, parent, ErrParentNotFound)
		}
		b := binding(v)
		psi, pnode = b.shard(), b.node()
		sh := ix.shards[psi]
		sh.mu.RLock() // (the node is ws's, so it stays; its shard's arrays may move)
		m := sh.meta(pnode)
		pkey, depth = m.key, m.depth+1
		sh.mu.RUnlock()
	}
	keys := ws.keys[:0]
	for k, i := pkey, 0; i < len(blocks); i++ {
		k = pathKey(k, blocks[i].BlockHash)
		keys = append(keys, k)
	}
	ws.keys = keys
	var sink uint64
	for _, bl := range blocks {
		sink += ws.blocks.first(bl.EngineHash) // overlap the worker-map misses of the run
	}
	ws.sink += sink
	// segment returns the blocks from i to the end of i's segment and the
	// shard and node they go under.
	segment := func(i int) (end, si int, under uint32) {
		d := depth + uint32(i)
		end = int(min(uint64(len(blocks)), uint64(i)+ix.segmentEnd(d)-uint64(d)))
		if i == 0 && hasParent && !ix.segmentStart(d) {
			return end, psi, pnode
		}
		return end, ix.shardOf(keys[i]), rootID
	}
	var dups, full uint64
	moved := ws.moved[:0]
	for i := 0; i < len(blocks); {
		end, si, prev := segment(i)
		sh := ix.shards[si]
		sh.mu.Lock()
		var memo setMemo
		for ; i < end; i++ {
			bl := blocks[i]
			id := sh.child(prev, keys[i], depth+uint32(i))
			prev = id
			p, had := ws.blocks.ref(bl.EngineHash)
			b := binding(*p)
			if had && b.shard() != si {
				// The engine hash moves to a prefix in another shard:
				// its old binding is dropped there after this
				// segment, holding one shard lock at a time.
				moved = append(moved, b)
				had, b = false, 0
			}
			switch {
			case had && b.node() == id:
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
			default:
				// Hold the new node before dropping an old binding in this
				// shard, so that freeing the old node can never free the
				// new path.
				if !sh.adjust(id, ws.slot, tierOne(tier, 1), &memo) {
					// maxHolderCount of this worker's engine hashes already
					// hold this prefix on this tier: skip the block (an old
					// binding stays where it was).
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
		}
		sh.mu.Unlock()
		for _, b := range moved {
			ix.drop(ws, b)
		}
		moved = moved[:0]
	}
	ws.moved = moved
	ws.setCached()
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

func tierOne(t kv.Tier, v int8) tierDelta {
	var d tierDelta
	d[t] = v
	return d
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

// StoreTier adds a copy on tier to blocks w already holds, named by engine
// hash only. Unknown hashes are counted and ErrBlockNotFound is returned after
// the rest are applied.
func (ix *Index) StoreTier(w kv.WorkerRank, engineHashes []uint64, tier kv.Tier) error {
	ws := ix.reg.getOrCreate(w)
	ws.mu.Lock()
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
	ws := ix.reg.get(w)
	if ws == nil {
		ws = ix.reg.getOrCreate(w)
	}
	ws.mu.Lock()
	err := ix.update(ws, engineHashes, tier, -1)
	ws.mu.Unlock()
	ix.checkAfter()
	return err
}

// update adds (dir > 0) or removes one copy on tier for each engine hash.
func (ix *Index) update(ws *workerState, hashes []uint64, tier kv.Tier, dir int) error {
	op := "remove"
	if dir > 0 {
		op = "store tier"
	}
	if tier >= kv.NumTiers {
		ws.blockNotFound.Add(uint64(len(hashes)))
		return fmt.Errorf("%s on %s: tier %d: %w", op, ws.w, tier, ErrBlockNotFound)
	}
	var sh *shard
	cur := -1
	var memo setMemo
	missing, applied, dups, full := 0, 0, 0, 0
	var sink uint64
	for _, eh := range hashes {
		sink += ws.blocks.first(eh) // overlap the worker-map misses of the batch
	}
	ws.sink += sink
	for i, eh := range hashes {
		p := ws.blocks.find(eh)
		if p == nil || (dir < 0 && binding(*p).copies(tier) == 0) {
			missing++
			continue
		}
		applied++
		b := binding(*p)
		c := b.copies(tier)
		if dir > 0 {
			if c < maxCopies {
				b = b.withCopies(tier, c+1)
			}
			if c > 0 {
				dups++
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
			applied--
			full++
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
	if dir > 0 {
		ws.blocksStored.Add(uint64(applied))
		ws.dupStore.Add(uint64(dups))
	} else {
		ws.removes.Add(1)
		ws.blocksRemoved.Add(uint64(applied))
	}
	ws.setCached()
	if missing > 0 {
		ws.blockNotFound.Add(uint64(missing))
		return fmt.Errorf("%s on %s: %d of %d engine hashes unknown on tier %d: %w",
			op, ws.w, missing, len(hashes), tier, ErrBlockNotFound)
	}
	if full > 0 {
		ws.invalid.Add(1)
		return fmt.Errorf("%s on %s: %d of %d engine hashes skipped: their prefix already holds %d of the worker's engine hashes on tier %d: %w",
			op, ws.w, full, len(hashes), maxHolderCount, tier, ErrInvalid)
	}
	return nil
}

// Clear drops everything w holds, on every tier.
func (ix *Index) Clear(w kv.WorkerRank) {
	if ws := ix.reg.get(w); ws != nil {
		ws.mu.Lock()
		ix.clear(ws)
		ws.mu.Unlock()
		ix.checkAfter()
	}
}

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
	ws.blocks = u64map{}
	ws.setCached()
}

// RemoveWorker drops everything held by every rank of worker id.
func (ix *Index) RemoveWorker(id string) {
	for _, ws := range ix.reg.all() {
		if ws.w.ID != id {
			continue
		}
		ws.mu.Lock()
		ix.clear(ws)
		ws.mu.Unlock()
	}
	ix.checkAfter()
}

// Cached returns the number of blocks in w's index.
func (ix *Index) Cached(w kv.WorkerRank) uint64 {
	if ws := ix.reg.get(w); ws != nil {
		return ws.cached.Load()
	}
	return 0
}

// Workers returns every worker/rank holding at least one block, sorted by ID
// then rank.
func (ix *Index) Workers() []kv.WorkerRank {
	var out []kv.WorkerRank
	for _, ws := range ix.reg.all() {
		if ws.cached.Load() > 0 {
			out = append(out, ws.w)
		}
	}
	slices.SortFunc(out, func(a, b kv.WorkerRank) int {
		if a.ID != b.ID {
			if a.ID < b.ID {
				return -1
			}
			return 1
		}
		return int(a.DPRank) - int(b.DPRank)
	})
	return out
}

// Stats returns the counters, summed over workers and shards.
func (ix *Index) Stats() Stats {
	var st Stats
	for _, ws := range ix.reg.all() {
		st.Stores += ws.stores.Load()
		st.Removes += ws.removes.Load()
		st.BlocksStored += ws.blocksStored.Load()
		st.BlocksRemoved += ws.blocksRemoved.Load()
		st.ParentNotFound += ws.parentNotFound.Load()
		st.Invalid += ws.invalid.Load()
		st.BlockNotFound += ws.blockNotFound.Load()
		st.DuplicateStore += ws.dupStore.Load()
		st.Residencies += ws.cached.Load()
	}
	for _, sh := range ix.shards {
		sh.mu.RLock()
		st.Nodes += uint64(sh.live)
		sh.mu.RUnlock()
	}
	return st
}

func (ix *Index) checkAfter() {
	if ix.cfg.CheckInvariants {
		if err := ix.CheckInvariants(); err != nil {
			panic(err)
		}
	}
}

// String formats a worker/rank as id/rank.
