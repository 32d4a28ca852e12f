package radix

import "math/bits"

// spareWords keeps the entry and bitmap arrays of freed holder sets (those of
// spareMinWords or more) for new sets, by capacity class, up to spareMaxWords
// in all. Under churn, a popular prefix's set changes with every store and
// evict of it; reusing the arrays spares the allocator and the GC the copies.
type spareWords struct {
	byClass [32][][]uint64 // class c holds capacities in [2^c, 2^(c+1))
	words   int
}

const (
	spareMinWords = 64
	spareMaxWords = 1 << 16 // per shard: 512 KiB
)

// get returns an array of n words (contents arbitrary): a pooled one of
// class log2(n) or the next if it is large enough, else a new one of exactly n.
func (p *spareWords) get(n int) []uint64 {
	if n < spareMinWords {
		return make([]uint64, n)
	}
	c := bits.Len(uint(n)) - 1 // 2^c <= n < 2^(c+1)
	for k := c; k <= c+1 && k < len(p.byClass); k++ {
		if l := p.byClass[k]; len(l) > 0 && cap(l[len(l)-1]) >= n {
			a := l[len(l)-1]
			l[len(l)-1] = nil
			p.byClass[k] = l[:len(l)-1]
			p.words -= cap(a)
			return a[:n]
		}
	}
	return make([]uint64, n)
}

// put offers a for reuse.
func (p *spareWords) put(a []uint64) {
	c := bits.Len(uint(cap(a))) - 1
	if cap(a) < spareMinWords || c >= len(p.byClass) || p.words+cap(a) > spareMaxWords {
		return
	}
	p.byClass[c] = append(p.byClass[c], a)
	p.words += cap(a)
}
