package ingest

import (
	"cmp"
	"slices"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// An inexact rank (history was lost, its blocks were kept) may claim blocks
// its engine evicted meanwhile. Such over-claims heal as requests make the
// engine store the blocks again, but they must not grow without bound: an
// engine cannot hold more blocks than its cache has. The capacity is the
// registration's (Worker.CapacityTokens over the router's block size) or,
// when it has none, learned: the most blocks the rank held while exact.
// Past it, an inexact rank drops claims oldest first: blocks it held before
// it became inexact (the likeliest to be stale), then the blocks stored
// since, in store order, and last the older blocks on the path of a block
// stored since, or under which the engine stored (the engine just used
// them). Among older blocks, deeper ones go first: engines evict leaves first (a
// prefix outlives what extends it), and a prefix the router dropped would
// hide what it still holds under it (Match stops at the first block a rank
// lacks) and refuse the engine's later stores under it (parent not found).
//
// A rank trims only once the engine has stored at least its capacity since
// it became inexact: an LRU cache that admitted that many blocks has
// evicted every older block it did not use since, while before that, a
// block the router drops may well be one the engine still holds (and will
// extend). Until then an inexact rank claims at most what it held plus what
// was stored since, under twice its capacity.

// bounder is a sink that can drop a rank's oldest claims (the index sink).
type bounder interface {
	// track starts (on) or stops recording the rank's stores in order.
	track(on bool)
	// trim drops the rank's oldest claims until it holds at most limit
	// blocks less a margin, and reports how many it dropped.
	trim(limit uint64) uint64
}

// trimMargin: a trim goes limit/trimMargin below limit, so that a rank at
// its capacity does not export its claims on every batch.
const trimMargin = 16

// maxTouched bounds the older blocks a claim log remembers as used.
const maxTouched = 1 << 16

// claimLog is what an inexact rank stored since it became inexact, in
// order. order may hold hashes removed or stored twice since: trim skips
// those it no longer holds, and drops them from the log.
type claimLog struct {
	on    bool
	fresh map[uint64]struct{}
	// touched are older blocks the engine stored under since (bounded by
	// maxTouched); stored counts the blocks stored since.
	touched map[uint64]struct{}
	stored  uint64
	order   []uint64
	// trim's buffers: the rank's export and the older blocks' order.
	held  []heldBlock
	nodes []exportNode // by export ref
	old   []int        // indexes into held
}

// note records the stores of a run of w's own rank, under parent (if
// hasParent): the engine has just used the parent's path.
func (c *claimLog) note(parent uint64, hasParent bool, blocks []kv.Block) {
	c.stored += uint64(len(blocks))
	if hasParent {
		if _, ok := c.fresh[parent]; !ok && len(c.touched) < maxTouched {
			c.touched[parent] = struct{}{}
		}
	}
	for i := range blocks {
		eh := blocks[i].EngineHash
		if _, ok := c.fresh[eh]; !ok {
			c.fresh[eh] = struct{}{}
			c.order = append(c.order, eh)
		}
	}
}

func (s *indexSink) track(on bool) {
	c := &s.claims
	c.on = on
	if !on {
		*c = claimLog{}
		return
	}
	if c.fresh == nil {
		c.fresh, c.touched = make(map[uint64]struct{}), make(map[uint64]struct{})
	}
}

func (s *indexSink) trim(limit uint64) uint64 {
	c := &s.claims
	if n := s.idx.Cached(s.w); n <= limit || c.stored < limit {
		return 0
	}
	c.held, c.nodes = c.held[:0], c.nodes[:0]
	if err := s.idx.NewExporter().Rank(s.w, &claimExport{c}); err != nil {
		return 0
	}
	held := uint64(len(c.held))
	drop := held - min(limit-limit/trimMargin, held)
	var victims [kv.NumTiers][]uint64
	var dropped uint64
	take := func(b *heldBlock) {
		for t, k := range b.copies {
			for range k {
				victims[t] = append(victims[t], b.eh)
			}
		}
		dropped++
	}
	unused, used := c.oldestFirst()
	for _, i := range unused {
		if dropped == drop {
			break
		}
		take(&c.held[i])
	}
	byHash := make(map[uint64]int, len(c.held)-len(c.old))
	for i := range c.held {
		if _, fresh := c.fresh[c.held[i].eh]; fresh {
			byHash[c.held[i].eh] = i
		}
	}
	kept := c.order[:0]
	for _, eh := range c.order {
		i, ok := byHash[eh]
		switch {
		case !ok:
			delete(c.fresh, eh) // no longer held
		case dropped < drop:
			take(&c.held[i])
			delete(c.fresh, eh)
		default:
			kept = append(kept, eh)
		}
	}
	clear(c.order[len(kept):])
	c.order = kept
	for _, i := range used {
		if dropped == drop {
			break
		}
		take(&c.held[i])
	}
	for t, hs := range victims {
		if len(hs) > 0 {
			_ = s.idx.Remove(s.w, hs, kv.Tier(t)) // (all held: exported under the applier)
		}
	}
	return dropped
}

// oldestFirst returns the indexes in held of the blocks held before the rank
// became inexact, in the order to drop them, deepest first: those no block
// stored since extends, and those one does (an engine that extended a
// prefix has just used it: it goes after the blocks stored since).
func (c *claimLog) oldestFirst() (unused, used []int) {
	const usedBit = 1 << 31 // in nodes[ref].depth: a fresh block is at or under it
	for i := range c.held {
		_, fresh := c.fresh[c.held[i].eh]
		if _, t := c.touched[c.held[i].eh]; !fresh && !t {
			continue
		}
		for ref := c.held[i].ref; ref != radix.NoRef && int(ref) < len(c.nodes); ref = c.nodes[ref].parent {
			nd := &c.nodes[ref]
			if nd.depth&usedBit != 0 {
				break
			}
			nd.depth |= usedBit
		}
	}
	c.old = c.old[:0]
	for i := range c.held {
		if _, fresh := c.fresh[c.held[i].eh]; !fresh {
			c.old = append(c.old, i)
		}
	}
	key := func(i int) uint32 {
		if ref := c.held[i].ref; int(ref) < len(c.nodes) {
			return c.nodes[ref].depth
		}
		return 0
	}
	// Unused before used (the flag is the top bit), deeper before shallower.
	slices.SortStableFunc(c.old, func(a, b int) int {
		ka, kb := key(a), key(b)
		if (ka^kb)&usedBit != 0 {
			return cmp.Compare(ka&usedBit, kb&usedBit)
		}
		return cmp.Compare(kb, ka)
	})
	n := len(c.old)
	for n > 0 && key(c.old[n-1])&usedBit != 0 {
		n--
	}
	return c.old[:n], c.old[n:]
}

// heldBlock is one block a rank holds: its node (export ref) and copies
// per tier.
type heldBlock struct {
	eh     uint64
	ref    uint32
	copies [kv.NumTiers]uint8
}

// exportNode is a node of the rank's export: its parent ref and depth.
type exportNode struct {
	parent, depth uint32
}

// claimExport gathers a rank's export into a claim log.
type claimExport struct{ c *claimLog }

func (e *claimExport) Node(ref, parent, shard uint32, key uint64, depth uint32) error {
	for int(ref) >= len(e.c.nodes) {
		e.c.nodes = append(e.c.nodes, exportNode{parent: radix.NoRef})
	}
	e.c.nodes[ref] = exportNode{parent: parent, depth: min(depth, 1<<31-1)}
	return nil
}

func (e *claimExport) Binding(eh uint64, ref uint32, copies [kv.NumTiers]uint8) error {
	e.c.held = append(e.c.held, heldBlock{eh: eh, ref: ref, copies: copies})
	return nil
}
