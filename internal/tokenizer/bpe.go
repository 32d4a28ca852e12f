package tokenizer

import "container/heap"

// merge is one BPE merge: the pair it applies to ranks it, and id is the merged token.
type merge struct {
	rank uint32
	id   uint32
}

// bpe is a byte-level BPE model over raw bytes (vocab strings decoded from the ByteLevel
// alphabet), so pre-tokens need no mapping.
type bpe struct {
	vocab        map[string]uint32
	merges       map[uint64]merge
	bytes        [256]uint32
	ignoreMerges bool
	maxLen       int // the longest vocab entry, in bytes: longer words skip the lookup
}

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

// encodeWord appends the ids of one pre-token.
func (m *bpe) encodeWord(dst []uint32, w string) []uint32 {
	if m.ignoreMerges && len(w) <= m.maxLen {
		if id, ok := m.vocab[w]; ok {
			return append(dst, id)
		}
	}
	if len(w) == 1 {
		return append(dst, m.bytes[w[0]])
	}
	if len(w) <= 64 {
		return m.mergeSmall(dst, w)
	}
	return m.mergeHeap(dst, w)
}

// mergeSmall applies the lowest-ranked merge, leftmost first, until none applies. It keeps
// each adjacent pair's merge in an array, so a merge looks up only the two pairs it changes;
// finding the lowest is a scan, fastest for short words.
func (m *bpe) mergeSmall(dst []uint32, w string) []uint32 {
	var buf [64]uint32
	var pbuf [64]merge
	syms := buf[:len(w)]
	for i := 0; i < len(w); i++ {
		syms[i] = m.bytes[w[i]]
	}
	none := merge{rank: ^uint32(0)}
	pairs := pbuf[:len(w)-1]
	for i := range pairs {
		pairs[i] = m.pair(syms[i], syms[i+1], none)
	}
	for len(pairs) > 0 {
		at := 0
		for i := 1; i < len(pairs); i++ {
			if pairs[i].rank < pairs[at].rank {
				at = i
			}
		}
		if pairs[at].rank == none.rank {
			break
		}
		syms[at] = pairs[at].id
		syms = append(syms[:at+1], syms[at+2:]...)
		pairs = append(pairs[:at], pairs[at+1:]...)
		if at > 0 {
			pairs[at-1] = m.pair(syms[at-1], syms[at], none)
		}
		if at < len(pairs) {
			pairs[at] = m.pair(syms[at], syms[at+1], none)
		}
	}
	return append(dst, syms...)
}

func (m *bpe) pair(a, b uint32, none merge) merge {
	if mg, ok := m.merges[pairKey(a, b)]; ok {
		return mg
	}
	return none
}

// candidate is a merge that may apply at symbol pos; stale ones are skipped when popped.
type candidate struct {
	pos  int
	rank uint32
	id   uint32
}

type candidates []candidate

func (c candidates) Len() int { return len(c) }
func (c candidates) Less(i, j int) bool {
	if c[i].rank != c[j].rank {
		return c[i].rank < c[j].rank
	}
	return c[i].pos < c[j].pos
}
func (c candidates) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *candidates) Push(x any)   { *c = append(*c, x.(candidate)) }
func (c *candidates) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// mergeHeap is the same algorithm as mergeSmall on a linked list with a priority queue, as the
// Rust library does it, so long words (a 30,000-character run of one letter) stay n log n.
func (m *bpe) mergeHeap(dst []uint32, w string) []uint32 {
	n := len(w)
	id := make([]uint32, n)
	prev := make([]int, n)
	next := make([]int, n)
	alive := make([]bool, n)
	q := make(candidates, 0, n)
	for i := 0; i < n; i++ {
		id[i], prev[i], next[i], alive[i] = m.bytes[w[i]], i-1, i+1, true
	}
	next[n-1] = -1
	for i := 0; i+1 < n; i++ {
		if mg, ok := m.merges[pairKey(id[i], id[i+1])]; ok {
			q = append(q, candidate{i, mg.rank, mg.id})
		}
	}
	heap.Init(&q)
	for q.Len() > 0 {
		c := heap.Pop(&q).(candidate)
		if !alive[c.pos] || next[c.pos] < 0 {
			continue
		}
		r := next[c.pos]
		if mg, ok := m.merges[pairKey(id[c.pos], id[r])]; !ok || mg.id != c.id {
			continue
		}
		id[c.pos] = c.id
		alive[r] = false
		next[c.pos] = next[r]
		if next[r] >= 0 {
			prev[next[r]] = c.pos
		}
		if p := prev[c.pos]; p >= 0 {
			if mg, ok := m.merges[pairKey(id[p], id[c.pos])]; ok {
				heap.Push(&q, candidate{p, mg.rank, mg.id})
			}
		}
		if nx := next[c.pos]; nx >= 0 {
			if mg, ok := m.merges[pairKey(id[c.pos], id[nx])]; ok {
				heap.Push(&q, candidate{c.pos, mg.rank, mg.id})
			}
		}
	}
	for i := 0; i >= 0; i = next[i] {
		dst = append(dst, id[i])
	}
	return dst
}
