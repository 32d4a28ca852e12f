package radix

import "github.com/kvrouter/kvrouter/internal/kv"

// A binding packs where an engine hash sits and how many copies it has per
// tier: node id (bits 0-31), shard (32-39), then a 6-bit copy count per tier
// (tier t at bit 40+6t, saturating at maxCopies).
type binding uint64

const maxCopies = 63

func makeBinding(shard int, node uint32) binding {
	return binding(uint64(node) | uint64(shard)<<32)
}

func (b binding) node() uint32 { return uint32(b) }
func (b binding) shard() int   { return int(b>>32) & 0xff }
func (b binding) copies(t kv.Tier) uint32 {
	return uint32(b>>(40+6*uint(t))) & maxCopies
}
func (b binding) withCopies(t kv.Tier, c uint32) binding {
	sh := 40 + 6*uint(t)
	return b&^(maxCopies<<sh) | binding(c)<<sh
}
func (b binding) empty() bool { return b>>40 == 0 }

// holderDelta is the holder-entry change that drops every tier b has copies on.
func (b binding) holderDelta() tierDelta {
	var d tierDelta
	for t := kv.Tier(0); t < kv.NumTiers; t++ {
		if b.copies(t) > 0 {
			d[t] = -1
		}
	}
	return d
}
