package engine

import (
	"errors"
	"fmt"
)

// ErrNoTokenizer is returned for a text prompt to an engine configured without a tokenizer.
var ErrNoTokenizer = errors.New("engine has no tokenizer")

// Tokenize encodes a completion prompt as a real engine's completions endpoint does: with the
// engine's own tokenizer, special tokens added. The blocks the engine then stores and announces
// are of these tokens, whatever the router computed from the same text.
func (e *Engine) Tokenize(text string) ([]uint32, error) {
	if e.cfg.Tokenizer == nil {
		return nil, fmt.Errorf("engine %s: %w", e.cfg.ID, ErrNoTokenizer)
	}
	ids, err := e.cfg.Tokenizer.Encode(text, true)
	if err != nil {
		return nil, fmt.Errorf("engine %s: tokenize: %w", e.cfg.ID, err)
	}
	return ids, nil
}

// ServeTextAndPublish tokenizes text and serves it as ServeAndPublish does.
func (e *Engine) ServeTextAndPublish(text string, outputTokens int) (Result, error) {
	toks, err := e.Tokenize(text)
	if err != nil {
		return Result{}, err
	}
	return e.ServeAndPublish(Request{Tokens: toks, OutputTokens: outputTokens})
}
