package load

// docPool describes the synthetic prompts of the load test: Docs documents
// of DocBlocks blocks each; documents of one group share their first
// SharedBlocks blocks (a system prompt).
type docPool struct {
	Docs, Groups, DocBlocks, SharedBlocks, BlockSize int
}

func mix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// tokens appends document d's tokens.
func (p docPool) tokens(d int, dst []uint32) []uint32 {
	g := d % p.Groups
	for b := 0; b < p.DocBlocks; b++ {
		src := uint64(1)<<62 | uint64(g)<<20 | uint64(b) // shared prefix block
		if b >= p.SharedBlocks {
			src = uint64(d)<<20 | uint64(b)
		}
		for i := 0; i < p.BlockSize; i++ {
			dst = append(dst, uint32(mix(src*64+uint64(i))%128000))
		}
	}
	return dst
}
