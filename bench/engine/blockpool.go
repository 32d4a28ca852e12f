package engine

// BlockPool is vLLM V1's KV block pool with prefix caching: a fixed set of
// blocks, each with a reference count; a queue of free blocks in eviction
// order; and a map from block hash to the cached block holding it. A block
// held by a running request (refs > 0) is never evicted. A freed block keeps
// its hash and stays findable until it is taken from the head of the free
// queue for new data, which is when it is evicted (BlockRemoved).
type BlockPool struct {
	blocks []poolBlock
	// free is a doubly linked list through poolBlock.prev/next with a
	// sentinel at index len(blocks); head is evicted first.
	sentinel int32
	nfree    int
	cached   map[uint64]int32
	removed  []uint64 // hashes evicted since the last TakeRemoved
}

type poolBlock struct {
	refs       int32
	hash       uint64
	hashed     bool
	inFree     bool
	prev, next int32
}

// NewBlockPool returns a pool of n free blocks, none cached.
func NewBlockPool(n int) *BlockPool {
	if n <= 0 {
		n = 1
	}
	p := &BlockPool{}
	p.reset(n)
	return p
}

func (p *BlockPool) reset(n int) {
	p.blocks = make([]poolBlock, n+1)
	p.sentinel = int32(n)
	s := &p.blocks[n]
	s.prev, s.next = p.sentinel, p.sentinel
	p.nfree = 0
	p.cached = make(map[uint64]int32)
	p.removed = p.removed[:0]
	for i := 0; i < n; i++ {
		p.pushTail(int32(i))
	}
}

// Reset frees every block and forgets every hash, without events.
func (p *BlockPool) Reset() { p.reset(len(p.blocks) - 1) }

// NumBlocks is the pool's size.
func (p *BlockPool) NumBlocks() int { return len(p.blocks) - 1 }

// NumFree is how many blocks could be handed out now (free, cached or not).
func (p *BlockPool) NumFree() int { return p.nfree }

// NumCached is how many distinct hashes the pool holds.
func (p *BlockPool) NumCached() int { return len(p.cached) }

// Lookup is the cached block holding hash h.
func (p *BlockPool) Lookup(h uint64) (int32, bool) {
	b, ok := p.cached[h]
	return b, ok
}

// Refs is block b's reference count.
func (p *BlockPool) Refs(b int32) int { return int(p.blocks[b].refs) }

// Touch takes a reference on cached blocks a request reuses; a block that
// was free leaves the free queue, so it can no longer be evicted.
func (p *BlockPool) Touch(bs []int32) {
	for _, b := range bs {
		if p.blocks[b].refs == 0 {
			p.unlink(b)
		}
		p.blocks[b].refs++
	}
}

// Allocate hands out n blocks from the head of the free queue, evicting the
// hashes they held; it reports false, taking nothing, when fewer are free.
func (p *BlockPool) Allocate(n int, dst []int32) ([]int32, bool) {
	if n > p.nfree {
		return dst, false
	}
	for i := 0; i < n; i++ {
		b := p.blocks[p.sentinel].next
		p.unlink(b)
		blk := &p.blocks[b]
		if blk.hashed {
			if p.cached[blk.hash] == b {
				delete(p.cached, blk.hash)
				p.removed = append(p.removed, blk.hash)
			}
			blk.hashed = false
		}
		blk.refs = 1
		dst = append(dst, b)
	}
	return dst, true
}

// Free drops one reference on each block, in the order given: a block whose
// count reaches zero joins the tail of the free queue. vLLM frees a
// request's blocks tail first, so its prefix is evicted last.
func (p *BlockPool) Free(bs []int32) {
	for _, b := range bs {
		blk := &p.blocks[b]
		blk.refs--
		if blk.refs == 0 {
			p.pushTail(b)
		}
	}
}

// Cache marks block b as holding hash h, full and reusable. It reports
// false when another block already holds h (the data was computed twice);
// that block stays the cached one and b is left unhashed.
func (p *BlockPool) Cache(b int32, h uint64) bool {
	if _, dup := p.cached[h]; dup {
		return false
	}
	p.blocks[b].hash, p.blocks[b].hashed = h, true
	p.cached[h] = b
	return true
}

// TakeRemoved returns the hashes evicted since the last call.
func (p *BlockPool) TakeRemoved() []uint64 {
	if len(p.removed) == 0 {
		return nil
	}
	r := append([]uint64(nil), p.removed...)
	p.removed = p.removed[:0]
	return r
}

// FreeOrder lists the free blocks from the next to be evicted; tests use it.
func (p *BlockPool) FreeOrder() []int32 {
	var out []int32
	for b := p.blocks[p.sentinel].next; b != p.sentinel; b = p.blocks[b].next {
		out = append(out, b)
	}
	return out
}

// Hash is block b's hash, if it holds one.
func (p *BlockPool) Hash(b int32) (uint64, bool) { return p.blocks[b].hash, p.blocks[b].hashed }

func (p *BlockPool) pushTail(b int32) {
	s := &p.blocks[p.sentinel]
	last := s.prev
	p.blocks[b].prev, p.blocks[b].next, p.blocks[b].inFree = last, p.sentinel, true
	p.blocks[last].next = b
	s.prev = b
	p.nfree++
}

func (p *BlockPool) unlink(b int32) {
	blk := &p.blocks[b]
	if !blk.inFree {
		return
	}
	p.blocks[blk.prev].next = blk.next
	p.blocks[blk.next].prev = blk.prev
	blk.inFree = false
	p.nfree--
}
