package radix

import "sync"

// A shard owns the path segments (see Config.SegmentBlocks) whose first node's
// path key maps to it. A segment's first node is a child of the shard's root,
// whatever its depth, keyed by its path key: so the index tells two paths
// apart there by their 64-bit path keys alone, as it tells two prompts' first
// blocks apart by their block hashes. Everything in a shard is guarded by mu:
// writers (one run's segment, one remove batch's nodes in the shard) take it
// exclusively, Match takes it shared while it walks a segment.
//
// Nodes live in a chunked arena and are named by uint32 ids; a node carries its
// path key, a 64-bit hash chained from the root through the block hashes of its
// path (see pathKey). Because the query's path keys can be computed from the
// prompt alone, no node needs a child map: a node's child is looked for at the
// next id (a run's nodes get consecutive ids, see alloc), where it is told by
// parent and key, and only the children found elsewhere (not chained) are
// keyed by path key in the shard's kids map.
//
// A node does not list its holders itself: it points to an interned, immutable,
// reference-counted holder set (see hset). Nodes along a shared
// prefix usually have the same holders, so they point to the same set: the
// memory is shared and Match detects "nobody leaves here" by comparing set ids.
type shard struct {
	mu sync.RWMutex

	chunks []*nodeChunk
	next   uint32   // ids below next have been handed out
	free   []uint32 // freed node ids, reused first
	live   int      // live nodes, root excluded

	kids u64map           // path key -> node id, for nodes not chained
	over map[ovKey]uint32 // unchained nodes whose path key another one has in kids

	sets     []hset
	freeSets []uint32
	intern   u64map     // set content hash -> set id
	spare    spareWords // arrays of freed sets, for new sets
	sink     uint64     // keeps prefetching loads alive
	seed     uint64     // kids' and intern's (see u64map)

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

func newShard(seed uint64) *shard {
	s := &shard{seed: seed}
	s.reset()
	return s
}

// reset returns the shard to its empty state, releasing all memory.
func (s *shard) reset() {
	s.chunks = nil // the first chunk, with the root, comes with the first node
	s.next = 1
	s.free = nil
	s.live = 0
	s.kids = u64map{seed: s.seed}
	s.over = nil
	s.sets = []hset{{}} // emptySet
	s.freeSets = nil
	s.intern = u64map{seed: s.seed}
	s.spare = spareWords{}
}
