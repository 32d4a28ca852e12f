package engine

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/openai"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// Text prompt errors.
var (
	ErrNoTextTokenizer = errors.New("engine has no tokenizer for text prompts")
	ErrNoChatTemplate  = errors.New("engine has no chat template")
	ErrNotChat         = errors.New("not a chat body (no messages)")
)

// TextTokenizer tokenizes prompts as vLLM does with a model's tokenizer and chat template: a
// completion's prompt with special tokens added; a chat rendered by the template with
// add_generation_prompt true, then encoded without adding special tokens (the template writes
// them); a body's own add_generation_prompt and add_special_tokens win. It has the methods of
// the OpenAI front's PromptTokenizer.
type TextTokenizer struct {
	Tokenizer *tokenizer.Tokenizer
	// Template renders chat bodies; nil refuses them.
	Template *chattemplate.Template
}

// CompletionTokens tokenizes a /v1/completions text prompt.
func (t *TextTokenizer) CompletionTokens(_, prompt string) ([]uint32, error) {
	return t.Tokenizer.Encode(prompt, true)
}

// ChatTokens renders and tokenizes a /v1/chat/completions body.
func (t *TextTokenizer) ChatTokens(body []byte) ([]uint32, error) {
	req, err := openai.Parse(body, openai.DefaultLimits())
	if err != nil {
		return nil, err
	}
	if req.Kind != openai.Chat {
		return nil, ErrNotChat
	}
	return t.tokens(req)
}

// BodyTokens tokenizes a /v1/completions or /v1/chat/completions body.
func (t *TextTokenizer) BodyTokens(body []byte) ([]uint32, error) {
	req, err := openai.Parse(body, openai.DefaultLimits())
	if err != nil {
		return nil, err
	}
	return t.tokens(req)
}

func (t *TextTokenizer) tokens(req *openai.Request) ([]uint32, error) {
	if req.PromptTokens != nil {
		return req.PromptTokens, nil
	}
	text, addSpecial := req.Prompt, true
	if req.Kind == openai.Chat {
		if t.Template == nil {
			return nil, ErrNoChatTemplate
		}
		addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		var err error
		if text, err = t.Template.Render(chattemplate.Input{Messages: req.Messages, Tools: req.Tools,
			AddGenerationPrompt: addGen, Kwargs: req.ChatTemplateKwargs, ContinueFinalMessage: req.ContinueFinalMessage}); err != nil {
			return nil, err
		}
		addSpecial = false
	}
	if req.AddSpecialTokens != nil {
		addSpecial = *req.AddSpecialTokens
	}
	return t.Tokenizer.Encode(text, addSpecial)
}

// text is the engine's TextTokenizer, or an error when it has no tokenizer.
func (e *Engine) text() (*TextTokenizer, error) {
	if e.cfg.Tokenizer == nil {
		return nil, fmt.Errorf("engine %s: %w", e.cfg.ID, ErrNoTextTokenizer)
	}
	return &TextTokenizer{Tokenizer: e.cfg.Tokenizer, Template: e.cfg.ChatTemplate}, nil
}

// Tokenize encodes a completion prompt as a real engine's completions endpoint does: with the
// engine's own tokenizer, special tokens added. The blocks the engine then stores and announces
// are of these tokens, whatever the router computed from the same text.
func (e *Engine) Tokenize(text string) ([]uint32, error) {
	t, err := e.text()
	if err != nil {
		return nil, err
	}
	ids, err := t.CompletionTokens("", text)
	if err != nil {
		return nil, fmt.Errorf("engine %s: tokenize: %w", e.cfg.ID, err)
	}
	return ids, nil
}

// TokenizeBody encodes an OpenAI /v1/completions or /v1/chat/completions body as vLLM does
// (TextTokenizer).
func (e *Engine) TokenizeBody(body []byte) ([]uint32, error) {
	t, err := e.text()
	if err != nil {
		return nil, err
	}
	ids, err := t.BodyTokens(body)
	if err != nil {
		return nil, fmt.Errorf("engine %s: tokenize body: %w", e.cfg.ID, err)
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
