package ingest

import "github.com/kvrouter/kvrouter/internal/kv"

// An inexact rank (history was lost, its blocks were kept) may claim blocks
// its engine evicted meanwhile. Such over-claims heal as requests make the
// engine store the blocks again, but they must not grow without bound: an
// engine cannot hold more blocks than its cache has. The capacity is the
// registration's (Worker.CapacityTokens over the router's block size) or,
// when it has none, learned: the most blocks the rank held while exact.
// Past it, an inexact rank drops claims oldest first: blocks it held before
// it became inexact (the likeliest to be stale), then the blocks stored
// since, in store order.

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

// claimLog is what an inexact rank stored since it became inexact, in
// order. order may hold hashes removed or stored twice since: trim skips
// those it no longer holds, and drops them from the log.
type claimLog struct {
	on    bool
	fresh map[uint64]struct{}
	order []uint64
	held  []heldBlock
}

// note records the stores of a run of w's own rank.
func (c *claimLog) note(blocks []kv.Block) {
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
		c.fresh = make(map[uint64]struct{})
	}
}

func (s *indexSink) trim(limit uint64) uint64 {
	n := s.idx.Cached(s.w)
	if n <= limit {
		return 0
	}
	target := limit - limit/trimMargin
	c := &s.claims
	c.held = c.held[:0]
	col := bindingCollector{out: &c.held}
	if err := s.idx.NewExporter().Rank(s.w, &col); err != nil {
		return 0
	}
	drop := uint64(len(c.held)) - min(target, uint64(len(c.held)))
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
	byHash := make(map[uint64]int, len(c.held))
	for i := range c.held {
		b := &c.held[i]
		if _, fresh := c.fresh[b.eh]; !fresh {
			if dropped < drop {
				take(b)
			}
			continue
		}
		byHash[b.eh] = i
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
	for t, hs := range victims {
		if len(hs) > 0 {
			_ = s.idx.Remove(s.w, hs, kv.Tier(t)) // (all held: exported under the applier)
		}
	}
	return dropped
}

// heldBlock is one block a rank holds, with its copies per tier.
type heldBlock struct {
	eh     uint64
	copies [kv.NumTiers]uint8
}

// bindingCollector gathers an export's bindings.
type bindingCollector struct{ out *[]heldBlock }

func (bindingCollector) Node(ref, parent, shard uint32, key uint64, depth uint32) error { return nil }

func (b bindingCollector) Binding(eh uint64, ref uint32, copies [kv.NumTiers]uint8) error {
	*b.out = append(*b.out, heldBlock{eh: eh, copies: copies})
	return nil
}
