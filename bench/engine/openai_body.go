package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// openAIRequest is the part of an OpenAI body the front reads.
type openAIRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`

	tokens    []uint32
	maxTokens int
}

// parse reads and checks the body; the status goes with the error.
func (s *OpenAIServer) parse(w http.ResponseWriter, r *http.Request, chat bool) (*openAIRequest, int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("body over %d bytes", s.cfg.MaxBodyBytes)
		}
		return nil, http.StatusBadRequest, err
	}
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("malformed JSON body: %w", err)
	}
	if req.Model == "" {
		return nil, http.StatusBadRequest, errors.New("the body names no model")
	}
	req.maxTokens = s.cfg.DefaultMaxTokens
	for _, m := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if m != nil {
			req.maxTokens = *m
		}
	}
	if req.maxTokens < 1 || req.maxTokens > s.cfg.MaxTokensLimit {
		return nil, http.StatusBadRequest, fmt.Errorf("max_tokens %d: want 1 to %d", req.maxTokens, s.cfg.MaxTokensLimit)
	}
	if chat {
		if len(req.Messages) == 0 {
			return nil, http.StatusBadRequest, errors.New("a chat completion needs messages")
		}
		if s.cfg.Tokenizer == nil {
			return nil, http.StatusBadRequest, ErrNoTokenizer
		}
		req.tokens, err = s.cfg.Tokenizer.ChatTokens(body)
	} else {
		req.tokens, err = s.promptTokens(req.Model, req.Prompt)
	}
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	if len(req.tokens) == 0 {
		return nil, http.StatusBadRequest, errors.New("the prompt is empty")
	}
	return &req, 0, nil
}

// promptTokens reads a completions prompt: token ids, a one-element list
// of them, or (with a tokenizer) text or a one-element list of texts.
func (s *OpenAIServer) promptTokens(model string, p json.RawMessage) ([]uint32, error) {
	if len(p) == 0 {
		return nil, errors.New("a completion needs a prompt")
	}
	var ids []uint32
	if json.Unmarshal(p, &ids) == nil {
		return ids, nil
	}
	var batch [][]uint32
	if json.Unmarshal(p, &batch) == nil {
		if len(batch) != 1 {
			return nil, fmt.Errorf("a prompt batch of %d: the simulated engine serves one prompt per request", len(batch))
		}
		return batch[0], nil
	}
	var text string
	if json.Unmarshal(p, &text) != nil {
		var texts []string
		if json.Unmarshal(p, &texts) != nil {
			return nil, errors.New("prompt: want token ids, a list of them, text or a list of texts")
		}
		if len(texts) != 1 {
			return nil, fmt.Errorf("a prompt batch of %d: the simulated engine serves one prompt per request", len(texts))
		}
		text = texts[0]
	}
	if s.cfg.Tokenizer == nil {
		return nil, ErrNoTokenizer
	}
	return s.cfg.Tokenizer.CompletionTokens(model, text)
}
