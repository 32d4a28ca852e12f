package scoring

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/normalize"
)

// Prompt is a request's prompt: exactly one of Tokens or BlockHashes is set.
type Prompt struct {
	Model       string
	Tokens      []uint32
	BlockHashes []uint64
	LoRAName    string
	CacheSalt   string
	MM          []MMItem
}

// MMItem is a prompt-side multimodal item as the client sends it.
type MMItem struct {
	Hash   string
	Offset uint32
	Length uint32
}

// hashPrompt validates p and returns its router block hashes in s.hashes.
func (r *Router) hashPrompt(p *Prompt, s *scratch) error {
	hasTokens, hasHashes := len(p.Tokens) > 0, len(p.BlockHashes) > 0
	switch {
	case hasTokens && hasHashes:
		return fmt.Errorf("%w: prompt sets both token_ids and block_hashes; set exactly one", ErrInvalidArgument)
	case !hasTokens && !hasHashes:
		return fmt.Errorf("%w: prompt is empty: set token_ids or block_hashes", ErrInvalidArgument)
	}
	if p.Model == "" {
		return fmt.Errorf("%w: prompt.model is empty", ErrInvalidArgument)
	}
	if hasHashes {
		if len(p.MM) > 0 {
			return fmt.Errorf("%w: prompt.mm_items apply to token_ids only; with block_hashes mix them into the hashes", ErrInvalidArgument)
		}
		if limit := r.cfg.MaxPromptTokens / r.cfg.BlockSize; len(p.BlockHashes) > limit {
			return fmt.Errorf("%w: prompt.block_hashes has %d blocks, over the limit of %d (--max-prompt-tokens / --block-size)", ErrInvalidArgument, len(p.BlockHashes), limit)
		}
		s.hashes = append(s.hashes[:0], p.BlockHashes...)
		return nil
	}
	if len(p.Tokens) > r.cfg.MaxPromptTokens {
		return fmt.Errorf("%w: prompt.token_ids has %d tokens, over --max-prompt-tokens %d", ErrInvalidArgument, len(p.Tokens), r.cfg.MaxPromptTokens)
	}
	s.mmItems = s.mmItems[:0]
	for i, it := range p.MM {
		if it.Hash == "" {
			return fmt.Errorf("%w: prompt.mm_items[%d].hash is empty", ErrInvalidArgument, i)
		}
		if it.Length == 0 {
			return fmt.Errorf("%w: prompt.mm_items[%d].length is 0", ErrInvalidArgument, i)
		}
		if uint64(it.Offset)+uint64(it.Length) > uint64(len(p.Tokens)) {
			return fmt.Errorf("%w: prompt.mm_items[%d] covers tokens [%d, %d), past the prompt's %d tokens", ErrInvalidArgument, i, it.Offset, uint64(it.Offset)+uint64(it.Length), len(p.Tokens))
		}
		s.mmItems = append(s.mmItems, normalize.MMItem{Hash: normalize.MMHash(it.Hash), Offset: it.Offset, Length: it.Length})
	}
	seed := normalize.Seed(p.LoRAName, p.CacheSalt)
	s.hashes = normalize.HashPrompt(seed, p.Tokens, r.cfg.BlockSize, s.mmItems, s.hashes[:0])
	return nil
}
