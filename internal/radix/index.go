package radix

import (
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

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
	// Seed keys the hash of the index's maps (see u64map), so that engines,
	// which choose the engine hashes the worker maps are keyed by, cannot
	// choose keys that collide. 0 means a random seed; set it in tests only.
	Seed uint64
	// SlotReuseDelay is how long the slot of a removed worker/rank (see
	// Score.Slot) is kept from new ones at least; it is given to one only
	// after every Match that could report it has finished, too. 0 means
	// DefaultSlotReuseDelay; negative means no delay (tests).
	SlotReuseDelay time.Duration
}

// Shard counts and the default segment length.
const (
	DefaultShards        = 64
	MaxShards            = 256
	DefaultSegmentBlocks = 64
	// DefaultSlotReuseDelay: far longer than a caller takes from a Match to
	// WorkerOf, or from removing a worker here to dropping its slots.
	DefaultSlotReuseDelay = 10 * time.Second
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
	seed   uint64 // Config.Seed or a random one: the maps' (see u64map)
	reg    registry

	active     []activeSet // for Match (see getActive)
	activeHint atomic.Uint32
	overflow   atomic.Int64 // Matches running with an active set not in active (see registry)
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
	seed := cfg.Seed
	for seed == 0 {
		seed = rand.Uint64() // (math/rand/v2: ChaCha8, seeded from the OS)
	}
	ix := &Index{cfg: cfg, shards: make([]*shard, n), shift: uint(64 - lg), seg: uint32(seg), seed: seed}
	ix.reg.seed = seed
	ix.reg.now = time.Now
	switch ix.reg.reuseDelay = cfg.SlotReuseDelay; {
	case cfg.SlotReuseDelay == 0:
		ix.reg.reuseDelay = DefaultSlotReuseDelay
	case cfg.SlotReuseDelay < 0:
		ix.reg.reuseDelay = 0
	}
	for i := range ix.shards {
		ix.shards[i] = newShard(seed)
	}
	ix.active = make([]activeSet, max(8, 4*runtime.GOMAXPROCS(0)))
	for i := range ix.active {
		ix.active[i].pooled = true
	}
	return ix
}

// Cached returns the number of blocks in w's index.
func (ix *Index) Cached(w kv.WorkerRank) uint64 {
	if ws := ix.reg.get(w); ws != nil {
		n := ws.cached.Load()
		if ws.dead.Load() { // (removed meanwhile: n may be the slot's next owner's)
			return 0
		}
		return n
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
	c, wss := ix.reg.snapshot() // c: the removed workers' counters
	for _, ws := range wss {
		c.add(ws)
		st.Residencies += ws.cached.Load()
	}
	st.Stores, st.Removes, st.BlocksStored, st.BlocksRemoved = c.stores, c.removes, c.blocksStored, c.blocksRemoved
	st.ParentNotFound, st.Invalid, st.BlockNotFound, st.DuplicateStore = c.parentNotFound, c.invalid, c.blockNotFound, c.dupStore
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
