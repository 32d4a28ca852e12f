package normalize

import (
	"github.com/kvrouter/kvrouter/internal/kv"
)

// Engine pages smaller than the router's block (SGLang's page size 1, 2, 4
// or 8 under a router block of 16) are assembled: consecutive pages of a
// chain make one router block once all of them are stored, named by its last
// page's hash (so that a child naming that page as parent finds it), and a
// removed page removes the router block it is part of. A router block in
// progress (a tail of fewer pages) is held per chain, by its last page, and
// kept after it is extended, so that another chain branching from it finds
// it too. Stores of such pages carry no multimodal extra keys (SGLang sends
// none) and tier-only stores of them are refused as a block size mismatch.

// maxPageEntries bounds the tails and page-to-block entries a rank keeps
// (a tail holds under a router block of tokens and page hashes: a few
// hundred bytes); past it both are forgotten (with a warning): later stores
// under a forgotten tail start a new router block, and a removed page that
// is not a block's last removes nothing. Engines evict a block's last page
// first (a leaf before its prefix), which names the router block itself.
const maxPageEntries = 1 << 15

// pageState is a rank's assembly state.
type pageState struct {
	tails map[uint64]pageTail // by the engine hash of the tail's last page
	group map[uint64]uint64   // a complete router block's pages but its last -> its engine hash
	cur   pageTail            // the tail being built (scratch)
}

// pageTail is a router block in progress: the pages stored so far and their
// tokens, and the router block it hangs under.
type pageTail struct {
	parent    uint64
	hasParent bool
	tokens    []uint32
	pages     []uint64
}

func (p *pageState) reset() {
	clear(p.tails)
	clear(p.group)
}

// smallPages reports whether engine pages of bs tokens are assembled.
func (n *Normalizer) smallPages(bs int) bool {
	return bs > 0 && bs < n.blockSize && n.blockSize%bs == 0
}

// storedPages normalizes a store of pages smaller than the router block.
func (n *Normalizer) storedPages(ev *rawEvent, b *Batch, tokens []uint32, bs int) {
	if _, f := kv.CheckRun(ev.BlockHashes, identity, ev.Parent, ev.HasParent); f != kv.RunOK {
		b.skip(reasonInvalidBlockSequence)
		return
	}
	ns, ok := n.namespace(ev)
	if !ok {
		b.skip(reasonAmbiguousCacheNamespace)
		return
	}
	n.engineBlockSize = bs
	n.remember(ev.BlockHashes, ns, b)
	seed := n.seeds.seed(ev.LoRAName, ns)
	p := &n.pages
	if p.tails == nil {
		p.tails, p.group = make(map[uint64]pageTail), make(map[uint64]uint64)
	}
	if len(p.tails)+len(p.group)+len(ev.BlockHashes) > maxPageEntries {
		n.warn(warnPagesOverflow, "page assembly memory full; forgetting the router blocks in progress",
			"max_page_entries", maxPageEntries)
		p.reset()
	}
	cur := &p.cur
	cur.tokens, cur.pages = cur.tokens[:0], cur.pages[:0]
	cur.parent, cur.hasParent = ev.Parent, ev.HasParent
	if t, ok := p.tails[ev.Parent]; ok && ev.HasParent {
		cur.parent, cur.hasParent = t.parent, t.hasParent
		cur.tokens, cur.pages = append(cur.tokens, t.tokens...), append(cur.pages, t.pages...)
	}
	start := len(b.blocks)
	runParent, runHasParent := cur.parent, cur.hasParent
	for j, h := range ev.BlockHashes {
		cur.tokens = append(cur.tokens, tokens[j*bs:(j+1)*bs]...)
		cur.pages = append(cur.pages, h)
		if len(cur.tokens) < n.blockSize {
			p.tails[h] = pageTail{parent: cur.parent, hasParent: cur.hasParent,
				tokens: append([]uint32(nil), cur.tokens...), pages: append([]uint64(nil), cur.pages...)}
			continue
		}
		if len(b.blocks) == start {
			runParent, runHasParent = cur.parent, cur.hasParent
		}
		b.blocks = append(b.blocks, kv.Block{EngineHash: h, BlockHash: BlockHash(seed, cur.tokens, nil)})
		for _, m := range cur.pages[:len(cur.pages)-1] {
			p.group[m] = h
		}
		cur.parent, cur.hasParent = h, true
		cur.tokens, cur.pages = cur.tokens[:0], cur.pages[:0]
	}
	if len(b.blocks) == start {
		b.held++ // a router block still in progress: nothing to index yet
		return
	}
	blocks := b.blocks[start:len(b.blocks):len(b.blocks)]
	b.routerBlocks += uint32(len(blocks))
	b.Events = append(b.Events, Event{Kind: KindStore, Tier: tierOf(ev.Medium), HasParent: runHasParent,
		Parent: runParent, Blocks: blocks})
}

// removedPages maps removed pages to the router blocks they are part of
// (each once); a page of a block in progress removes nothing. A page two
// router blocks share (chains that part inside a block) maps to the last one
// made: engines evict such a page only after the pages that follow it.
func (n *Normalizer) removedPages(ev *rawEvent, b *Batch) {
	p := &n.pages
	start := len(b.hashes)
	for _, h := range ev.BlockHashes {
		_, tail := p.tails[h]
		delete(p.tails, h)
		g, ok := p.group[h]
		switch {
		case ok:
			delete(p.group, h)
		case tail:
			continue // only in a block in progress: nothing indexed
		default:
			g = h
		}
		seen := false
		for _, x := range b.hashes[start:] {
			seen = seen || x == g
		}
		if !seen {
			b.hashes = append(b.hashes, g)
		}
	}
	if len(b.hashes) == start {
		b.held++
		return
	}
	b.Events = append(b.Events, Event{Kind: KindRemove, Tier: tierOf(ev.Medium),
		EngineHashes: b.hashes[start:len(b.hashes):len(b.hashes)]})
}
