package tracegen

// Block ids. A prompt is a sequence of segments, each a distinct piece of
// content (a system prompt, a user message, a reply, a tool output, a
// document, a question) of some length in tokens. The trace cuts the prompt
// into blocks of BlockTokens tokens and gives each block an id that stands
// for its content and everything before it, as Mooncake's hash ids do: two
// prompts get the same id at block k exactly when they agree on every token
// up to the end of block k. So a block of a prefix shared with an earlier
// prompt repeats that prompt's id, and a partial last block (fewer tokens)
// never shares an id with a full one.

// segment is one piece of content: id names it, n is its length in tokens.
type segment struct {
	id uint64
	n  int
}

// blockKey identifies a block: the id of the block before it and a hash of
// the (segment, offset, length) pieces it holds.
type blockKey struct {
	parent, content uint64
}

// rootParent is the parent of every prompt's first block.
const rootParent = ^uint64(0)

// blocker hands out segment ids and block ids; ids are dense, in order of
// first use.
type blocker struct {
	tokens  int
	byKey   map[blockKey]uint64
	nextID  uint64
	nextSeg uint64
}

func newBlocker(blockTokens int) *blocker {
	return &blocker{tokens: blockTokens, byKey: make(map[blockKey]uint64)}
}

// segment returns new content of n tokens.
func (b *blocker) segment(n int) segment {
	b.nextSeg++
	return segment{id: b.nextSeg, n: n}
}

func (b *blocker) id(k blockKey) uint64 {
	id, ok := b.byKey[k]
	if !ok {
		id = b.nextID
		b.nextID++
		b.byKey[k] = id
	}
	return id
}

// mix64 is splitmix64's finaliser: a well-mixed bijection on uint64.
func mix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// prompt is a growing prompt; the ids of its full blocks are kept, so a
// session that appends to its prompt each turn pays only for the new blocks.
type prompt struct {
	segs   []segment
	tokens int
	full   []uint64 // ids of the leading full blocks computed so far
	seg    int      // segment and offset where block len(full) starts
	off    int
}

func (p *prompt) add(s ...segment) {
	for _, x := range s {
		p.segs = append(p.segs, x)
		p.tokens += x.n
	}
}

// ids returns the prompt's block ids, ceil(tokens / block tokens) of them,
// in a new slice.
func (b *blocker) ids(p *prompt) []uint64 {
	parent := rootParent
	if len(p.full) > 0 {
		parent = p.full[len(p.full)-1]
	}
	seg, off := p.seg, p.off
	h, fill := uint64(0), 0
	for seg < len(p.segs) {
		s := p.segs[seg]
		n := min(s.n-off, b.tokens-fill)
		h = mix64(h ^ s.id)
		h = mix64(h ^ uint64(off))
		h = mix64(h ^ uint64(n))
		fill += n
		off += n
		if off == s.n {
			seg, off = seg+1, 0
		}
		if fill == b.tokens {
			parent = b.id(blockKey{parent, h})
			p.full = append(p.full, parent)
			p.seg, p.off = seg, off
			h, fill = 0, 0
		}
	}
	out := make([]uint64, len(p.full), len(p.full)+1)
	copy(out, p.full)
	if fill > 0 {
		out = append(out, b.id(blockKey{parent, h}))
	}
	return out
}
