// Package enginetok asks the engine to tokenize: vLLM's POST /tokenize, which takes a completion
// prompt or chat messages and is always served (unlike its render endpoints). Calls have a
// timeout and bounded concurrency; an engine that answers 404 or refuses is an error, at start
// (Check) and at run time, never an empty token list.
package enginetok

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/openai"
)

// ErrEngine matches every error from the engine's endpoint.
var ErrEngine = errors.New("engine tokenize failed")

// Config configures a Client; zero fields take defaults.
type Config struct {
	// Endpoint is the engine's base URL, for example http://vllm:8000.
	Endpoint string
	// Model is the model name sent in requests.
	Model string
	// Timeout bounds a call (default 5s).
	Timeout time.Duration
	// MaxConcurrent bounds calls in flight (default 16); more wait, within their timeout.
	MaxConcurrent int
	// MaxResponseBytes bounds a response (default 16 MiB).
	MaxResponseBytes int64
	// HTTPClient (nil: a client of its own).
	HTTPClient *http.Client
}

// Client calls one engine's /tokenize.
type Client struct {
	cfg Config
	url string
	sem chan struct{}
}

// New checks cfg; Check then asks the engine.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("enginetok: tokenizer_endpoint %q: want http(s)://host:port", cfg.Endpoint)
	}
	if cfg.Model == "" {
		return nil, errors.New("enginetok: model is empty")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 16
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = 16 << 20
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	return &Client{cfg: cfg, url: strings.TrimSuffix(cfg.Endpoint, "/") + "/tokenize", sem: make(chan struct{}, cfg.MaxConcurrent)}, nil
}

// Name is the endpoint's URL.
func (c *Client) Name() string { return c.url }

// Check asks the engine to tokenize a word: a 404 (an engine without /tokenize) or any refusal
// is an error.
func (c *Client) Check(ctx context.Context) error {
	_, err := c.Text(ctx, "hello", true)
	return err
}

// Text tokenizes a completion prompt.
func (c *Client) Text(ctx context.Context, text string, addSpecial bool) ([]uint32, error) {
	return c.call(ctx, map[string]any{"model": c.cfg.Model, "prompt": text, "add_special_tokens": addSpecial})
}

// Chat renders and tokenizes a chat body's messages as the engine does.
func (c *Client) Chat(ctx context.Context, r *openai.Request) ([]uint32, error) {
	req := map[string]any{"model": c.cfg.Model, "messages": r.Messages, "add_generation_prompt": true}
	if r.AddGenerationPrompt != nil {
		req["add_generation_prompt"] = *r.AddGenerationPrompt
	}
	if r.AddSpecialTokens != nil {
		req["add_special_tokens"] = *r.AddSpecialTokens
	}
	if r.ContinueFinalMessage {
		req["continue_final_message"] = true
	}
	if r.Tools != nil {
		req["tools"] = r.Tools
	}
	if r.ChatTemplateKwargs != nil {
		req["chat_template_kwargs"] = r.ChatTemplateKwargs
	}
	return c.call(ctx, req)
}

type response struct {
	Count  *int     `json:"count"`
	Tokens []uint32 `json:"tokens"`
}

func (c *Client) call(ctx context.Context, body map[string]any) ([]uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s: waiting for a slot: %v", ErrEngine, c.url, ctx.Err())
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrEngine, c.url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: reading the answer: %v", ErrEngine, c.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered %s: %.200s", ErrEngine, c.url, resp.Status, data)
	}
	if int64(len(data)) > c.cfg.MaxResponseBytes {
		return nil, fmt.Errorf("%w: %s: answer over %d bytes", ErrEngine, c.url, c.cfg.MaxResponseBytes)
	}
	var r response
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %s: answer is not /tokenize's JSON: %v", ErrEngine, c.url, err)
	}
	if r.Count == nil || *r.Count != len(r.Tokens) || len(r.Tokens) == 0 {
		return nil, fmt.Errorf("%w: %s: answer has %d tokens (count %v): not /tokenize's shape", ErrEngine, c.url, len(r.Tokens), r.Count)
	}
	return r.Tokens, nil
}
