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

	// tokens is the prompt's length in tokens when it arrives as a
	// forwarded Route's block hashes (forward.go): its load counts them as
	// a token prompt's does.
	tokens int
}

// MMItem is a prompt-side multimodal item as the client sends it.
type MMItem struct {
	Hash   string
	Offset uint32
	Length uint32
}

// preparePrompt validates p and returns its router block hashes in s.hashes.
// Its work is bounded before it starts: the prompt's shape and sizes are
// checked first (MaxPromptTokens, MaxMMItems), then that a worker serves the
// model, and only then is the prompt hashed, in time linear in its tokens
// and items. It holds no Router lock while it hashes (r.mu only for the
// model lookup), so a long prompt delays no registry change and no other
// call.
func (r *Router) preparePrompt(p *Prompt, s *scratch) error {
	if err := r.checkPrompt(p); err != nil {
		return err
	}
	r.mu.RLock()
	served := len(r.models[p.Model]) > 0
	r.mu.RUnlock()
	if !served {
		return errNoWorker(p.Model)
	}
	return r.hashPrompt(p, s)
}

func errNoWorker(model string) error {
	return fmt.Errorf("%w: no registered worker serves model %q", ErrNotFound, model)
}

// checkPrompt checks p's shape and sizes, in time independent of its size.
func (r *Router) checkPrompt(p *Prompt) error {
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
			return limitError(LimitPromptTokens, ErrInvalidArgument, "prompt.block_hashes has %d blocks, over the limit of %d (--max-prompt-tokens / --block-size)", len(p.BlockHashes), limit)
		}
		return nil
	}
	if len(p.Tokens) > r.cfg.MaxPromptTokens {
		return limitError(LimitPromptTokens, ErrInvalidArgument, "prompt.token_ids has %d tokens, over --max-prompt-tokens %d", len(p.Tokens), r.cfg.MaxPromptTokens)
	}
	if len(p.MM) > r.cfg.MaxMMItems {
		return limitError(LimitMMItems, ErrInvalidArgument, "prompt.mm_items has %d items, over --max-mm-items %d", len(p.MM), r.cfg.MaxMMItems)
	}
	return nil
}

// hashPrompt validates p's multimodal items and returns its router block
// hashes in s.hashes. The caller has checked p (checkPrompt) and holds no
// lock: this is the part of a call whose work grows with the prompt.
func (r *Router) hashPrompt(p *Prompt, s *scratch) error {
	if len(p.BlockHashes) > 0 {
		s.hashes = append(s.hashes[:0], p.BlockHashes...)
		return nil
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
	s.hashes = s.hasher.Hash(seed, p.Tokens, r.cfg.BlockSize, s.mmItems, s.hashes[:0])
	if r.hashed != nil {
		r.hashed()
	}
	return nil
}
