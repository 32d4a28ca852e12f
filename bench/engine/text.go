package engine

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/openai"
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

// ErrNoChatTemplate is returned for a chat body to an engine configured without a chat template.
var ErrNoChatTemplate = errors.New("engine has no chat template")

// TokenizeBody encodes an OpenAI /v1/completions or /v1/chat/completions body as vLLM does: a
// completion's prompt with special tokens added; a chat rendered by the chat template with
// add_generation_prompt true, then encoded without adding special tokens (the template writes
// them); the body's own add_generation_prompt and add_special_tokens win.
func (e *Engine) TokenizeBody(body []byte) ([]uint32, error) {
	if e.cfg.Tokenizer == nil {
		return nil, fmt.Errorf("engine %s: %w", e.cfg.ID, ErrNoTokenizer)
	}
	req, err := openai.Parse(body, openai.DefaultLimits())
	if err != nil {
		return nil, fmt.Errorf("engine %s: %w", e.cfg.ID, err)
	}
	if req.PromptTokens != nil {
		return req.PromptTokens, nil
	}
	text, addSpecial := req.Prompt, true
	if req.Kind == openai.Chat {
		if e.cfg.ChatTemplate == nil {
			return nil, fmt.Errorf("engine %s: %w", e.cfg.ID, ErrNoChatTemplate)
		}
		addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		if text, err = e.cfg.ChatTemplate.Render(chattemplate.Input{Messages: req.Messages, Tools: req.Tools,
			AddGenerationPrompt: addGen, Kwargs: req.ChatTemplateKwargs, ContinueFinalMessage: req.ContinueFinalMessage}); err != nil {
			return nil, fmt.Errorf("engine %s: %w", e.cfg.ID, err)
		}
		addSpecial = false
	}
	if req.AddSpecialTokens != nil {
		addSpecial = *req.AddSpecialTokens
	}
	ids, err := e.cfg.Tokenizer.Encode(text, addSpecial)
	if err != nil {
		return nil, fmt.Errorf("engine %s: tokenize: %w", e.cfg.ID, err)
	}
	return ids, nil
}
