package scoring

import "github.com/kvrouter/kvrouter/internal/kv"

// credit is a rank's overlap credit: each matched block weighted by its best
// tier's weight, and predicted blocks as device blocks.
//
// The sum is written out, tier by tier in the order of the tiers (the
// operations and their order are those of a loop over them, so the credit
// is the same to the bit): a Route computes it for every rank that matched.
func (r *Router) credit(byTier *[kv.NumTiers]uint32, predicted uint32) float64 {
	w := &r.weights
	c := 0.0
	c += w[0] * float64(byTier[0])
	c += w[1] * float64(byTier[1])
	c += w[2] * float64(byTier[2])
	c += w[3] * float64(byTier[3])
	return c + w[kv.TierDevice]*float64(predicted)
}

// credit's written-out sum covers exactly kv.NumTiers tiers; a change in
// their number fails to compile here.
var _ = [1]struct{}{}[kv.NumTiers-4]

// costTerms is one candidate's cost and the terms it is made of (reported
// in Decision.Candidates).
type costTerms struct {
	prefill, decode, cost float64
}

// cost is the routing cost of rk for a prompt of promptBlocks blocks of
// which credit (tier-weighted) are cached on it:
//
//	prefill = prompt blocks - overlap credit + active prefill blocks
//	cost    = PrefillWeight * prefill + active decode blocks
//
// It is the one place PolicyBlocks' formula is written; under PolicyTime,
// timeCoster replaces the cost with seconds. The caller holds rk's model's
// lock (rk's load).
func (r *Router) cost(promptBlocks, credit float64, rk *rank) costTerms {
	prefill := promptBlocks - credit + float64(rk.prefillBlocks)
	decode := float64(rk.decodeBlocks)
	return costTerms{prefill: prefill, decode: decode, cost: r.cfg.PrefillWeight*prefill + decode}
}
