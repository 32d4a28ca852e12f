package scoring

import (
	"cmp"
	"slices"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// WorkerScore is one worker/rank's overlap with a prompt.
type WorkerScore struct {
	WorkerID  string
	DPRank    uint32
	Matched   uint32
	ByTier    [kv.NumTiers]uint32
	Predicted uint32
	Cached    uint64
}

// ScoreResult answers Score.
type ScoreResult struct {
	BlockSize    uint32
	PromptBlocks uint32
	// Scores has every worker/rank of the model, by Matched descending.
	Scores []WorkerScore
}

// Score reports every worker/rank of the prompt's model with its overlap.
// Predicted blocks count in Matched and as device blocks in ByTier.
func (r *Router) Score(p *Prompt) (*ScoreResult, error) {
	s := r.pool.Get().(*scratch)
	defer r.pool.Put(s)
	if err := r.preparePrompt(p, s); err != nil {
		return nil, err
	}
	r.mu.RLock()
	ranks, err := r.evaluate(p, s, true, r.cfg.now())
	if err != nil {
		r.mu.RUnlock()
		return nil, err
	}
	res := &ScoreResult{
		BlockSize:    uint32(r.cfg.BlockSize),
		PromptBlocks: uint32(len(s.hashes)),
		Scores:       make([]WorkerScore, len(ranks)),
	}
	for j, rk := range ranks {
		ws := WorkerScore{
			WorkerID:  rk.key.ID,
			DPRank:    rk.key.DPRank,
			Matched:   s.depth[j],
			ByTier:    s.byTier[j],
			Predicted: s.depth[j] - s.radixM[j],
			Cached:    s.cached[j],
		}
		ws.ByTier[kv.TierDevice] += ws.Predicted
		res.Scores[j] = ws
	}
	r.mu.RUnlock()
	r.learnSlots(s.missed)
	slices.SortStableFunc(res.Scores, func(a, b WorkerScore) int { return cmp.Compare(b.Matched, a.Matched) })
	return res, nil
}
