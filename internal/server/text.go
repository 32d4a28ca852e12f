package server

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/enginetok"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/openai"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// TextModel is a model whose prompts may come as text or OpenAI bodies: its tokenizer and, for
// chat bodies, its chat template (nil refuses them); or, instead of both, the engine's /tokenize.
type TextModel struct {
	Name      string
	Tokenizer *tokenizer.Tokenizer
	Template  *chattemplate.Template
	Engine    *enginetok.Client
}

// TextConfig configures text prompts.
type TextConfig struct {
	Models []TextModel
	// Limits bound OpenAI bodies; Limits.MaxBodyBytes bounds a text prompt too.
	Limits openai.Limits
	// BlockSize is the router's block size, for Tokenize's block hashes.
	BlockSize int
	// Drift configures the check of routed text prompts against the engine (drift.go).
	Drift DriftConfig
}

// textModels is what SetText installs; read-only afterwards.
type textModels struct {
	models    map[string]*TextModel
	limits    openai.Limits
	blockSize int
	drift     *driftTracker
	engineErr *prometheus.CounterVec
}

// SetText enables Prompt.text and Prompt.openai_body for cfg's models. Call it before serving.
func (s *Server) SetText(cfg TextConfig) error {
	if err := cfg.Limits.Validate(); err != nil {
		return err
	}
	if cfg.BlockSize <= 0 {
		return errors.New("server: TextConfig.BlockSize must be positive")
	}
	t := &textModels{models: make(map[string]*TextModel, len(cfg.Models)), limits: cfg.Limits, blockSize: cfg.BlockSize}
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if m.Name == "" || (m.Tokenizer == nil) == (m.Engine == nil) {
			return fmt.Errorf("server: text model %d needs a name and either a tokenizer or an engine", i)
		}
		if _, dup := t.models[m.Name]; dup {
			return fmt.Errorf("server: text model %q configured twice", m.Name)
		}
		t.models[m.Name] = m
	}
	d, err := newDriftTracker(cfg.Drift, s.reg, s.log)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	t.drift = d
	t.engineErr = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvrouter_tokenizer_engine_errors_total",
		Help: "Prompts the engine's /tokenize failed to tokenize (refused, unreachable, timed out), by model; each failed its call.",
	}, []string{"model"})
	if s.reg != nil {
		if err := s.reg.Register(t.engineErr); err != nil {
			return fmt.Errorf("server: %w", err)
		}
	}
	s.text = t
	return nil
}

// noteRouted records a routed text prompt for the drift check.
func (s *Server) noteRouted(res *textResult, p *scoring.Prompt, requestID string, d *scoring.Decision) {
	if res == nil || res.source != "local" || s.text == nil {
		return
	}
	w, _, ok := s.Registered(d.WorkerID)
	hasEvents := ok && w.GetKvEventsEndpoint() != ""
	var hashes []uint64
	if requestID != "" && hasEvents { // else counted unchecked without hashing
		hashes = normalize.HashPrompt(normalize.Seed(p.LoRAName, p.CacheSalt), p.Tokens, s.text.blockSize, nil, nil)
	}
	s.text.drift.routed(p.Model, requestID, d.WorkerID, d.DPRank, hashes, hasEvents)
}

// checkDrift judges a finished request's pending drift check, and the short checks whose grace
// has passed: how many of the router's blocks does the worker it was routed to hold now?
func (s *Server) checkDrift(requestID string) {
	if s.text == nil {
		return
	}
	if c, ok := s.text.drift.take(requestID); ok {
		s.judgeDrift(c)
	}
	for _, c := range s.text.drift.dueLate() {
		s.judgeDrift(c)
	}
}

func (s *Server) judgeDrift(c *driftCheck) {
	held := -1
	if res, err := s.router.Score(&scoring.Prompt{Model: c.model, BlockHashes: c.hashes}); err == nil {
		held = 0
		for _, ws := range res.Scores {
			if ws.WorkerID == c.worker && ws.DPRank == c.rank {
				held = int(ws.Matched - ws.Predicted) // the engine's blocks, not the router's guesses
			}
		}
	}
	s.text.drift.verdict(c, held)
}

// textResult is a text prompt's tokens and what made them.
type textResult struct {
	model     string
	cacheSalt string
	tokens    []uint32
	source    string // "local" or "none" (a body's prompt given as token ids)
	rendered  string
}

// promptText converts p into sp, tokenizing p.text or p.openai_body when set.
func (s *Server) promptText(sp *scoring.Prompt, p *kvrouterv1.Prompt) (*textResult, error) {
	if err := promptTo(sp, p); err != nil {
		return nil, err
	}
	hasText, hasBody := p.GetText() != "", len(p.GetOpenaiBody()) > 0
	if !hasText && !hasBody {
		return nil, nil
	}
	switch {
	case hasText && hasBody:
		return nil, status.Error(codes.InvalidArgument, "prompt sets both text and openai_body; set exactly one of token_ids, block_hashes, text or openai_body")
	case len(p.GetTokenIds()) > 0 || len(p.GetBlockHashes()) > 0:
		return nil, status.Error(codes.InvalidArgument, "prompt sets text or openai_body with token_ids or block_hashes; set exactly one")
	case len(p.GetMmItems()) > 0:
		return nil, status.Error(codes.InvalidArgument, "prompt.mm_items apply to token_ids only")
	}
	var (
		res *textResult
		err error
	)
	if hasText {
		res, err = s.tokenizeText(p)
	} else {
		res, err = s.tokenizeBody(p)
	}
	if err != nil {
		return nil, err
	}
	sp.Model, sp.CacheSalt, sp.Tokens = res.model, res.cacheSalt, res.tokens
	return res, nil
}

func (s *Server) model(name, field string) (*TextModel, error) {
	if name == "" {
		return nil, status.Errorf(codes.InvalidArgument, "%s is empty", field)
	}
	if s.text == nil {
		return nil, status.Error(codes.FailedPrecondition, "text prompts need a tokenizer: configure models: [{name, tokenizer}]")
	}
	m, ok := s.text.models[name]
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "%s %q has no tokenizer configured (models: in the config, or --model NAME=DIR)", field, name)
	}
	return m, nil
}

// tokenizeText tokenizes a completion prompt with special tokens, as /v1/completions does.
func (s *Server) tokenizeText(p *kvrouterv1.Prompt) (*textResult, error) {
	m, err := s.model(p.GetModel(), "prompt.model")
	if err != nil {
		return nil, err
	}
	if n := len(p.GetText()); n > s.text.limits.MaxBodyBytes {
		return nil, status.Errorf(codes.InvalidArgument, "prompt.text has %d bytes, over the limit of %d", n, s.text.limits.MaxBodyBytes)
	}
	if m.Engine != nil {
		ids, err := m.Engine.Text(context.Background(), p.GetText(), true)
		if err != nil {
			return nil, s.engineFailed(m, err)
		}
		return &textResult{model: m.Name, cacheSalt: p.GetCacheSalt(), tokens: ids, source: "engine"}, nil
	}
	ids, err := m.Tokenizer.Encode(p.GetText(), true)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "prompt.text: %v", err)
	}
	return &textResult{model: m.Name, cacheSalt: p.GetCacheSalt(), tokens: ids, source: "local"}, nil
}

// tokenizeBody renders and tokenizes an OpenAI body as the engine would.
func (s *Server) tokenizeBody(p *kvrouterv1.Prompt) (*textResult, error) {
	if s.text == nil {
		return nil, status.Error(codes.FailedPrecondition, "openai_body prompts need a tokenizer: configure models: [{name, tokenizer}]")
	}
	req, err := openai.Parse(p.GetOpenaiBody(), s.text.limits)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "prompt."+err.Error())
	}
	if p.GetModel() != "" && p.GetModel() != req.Model {
		return nil, status.Errorf(codes.InvalidArgument, "prompt.model %q differs from openai_body.model %q", p.GetModel(), req.Model)
	}
	salt := req.CacheSalt
	if p.GetCacheSalt() != "" {
		if salt != "" && salt != p.GetCacheSalt() {
			return nil, status.Errorf(codes.InvalidArgument, "prompt.cache_salt differs from openai_body.cache_salt")
		}
		salt = p.GetCacheSalt()
	}
	res := &textResult{model: req.Model, cacheSalt: salt}
	if req.Kind == openai.Completion && req.PromptTokens != nil {
		res.tokens, res.source = req.PromptTokens, "none"
		return res, nil
	}
	m, err := s.model(req.Model, "openai_body.model")
	if err != nil {
		return nil, err
	}
	if m.Engine != nil {
		return s.engineBody(m, req, res)
	}
	text, addSpecial := req.Prompt, true
	if req.Kind == openai.Chat {
		if m.Template == nil {
			return nil, status.Errorf(codes.FailedPrecondition, "model %q has no chat template (tokenizer_config.json chat_template or chat_template.jinja); chat bodies cannot be tokenized", m.Name)
		}
		addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		text, err = m.Template.Render(chattemplate.Input{Messages: req.Messages, Tools: req.Tools,
			AddGenerationPrompt: addGen, Kwargs: req.ChatTemplateKwargs, ContinueFinalMessage: req.ContinueFinalMessage})
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "prompt.openai_body: the chat template refused the messages: %v", err)
		}
		addSpecial, res.rendered = false, text
	}
	if req.AddSpecialTokens != nil {
		addSpecial = *req.AddSpecialTokens
	}
	if !utf8.ValidString(text) {
		return nil, status.Error(codes.InvalidArgument, "prompt.openai_body: text is not valid UTF-8")
	}
	if res.tokens, err = m.Tokenizer.Encode(text, addSpecial); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "prompt.openai_body: %v", err)
	}
	res.source = "local"
	return res, nil
}

// engineBody asks the engine to tokenize a body.
func (s *Server) engineBody(m *TextModel, req *openai.Request, res *textResult) (*textResult, error) {
	var err error
	if req.Kind == openai.Chat {
		res.tokens, err = m.Engine.Chat(context.Background(), req)
	} else {
		addSpecial := req.AddSpecialTokens == nil || *req.AddSpecialTokens
		res.tokens, err = m.Engine.Text(context.Background(), req.Prompt, addSpecial)
	}
	if err != nil {
		return nil, s.engineFailed(m, err)
	}
	res.source = "engine"
	return res, nil
}

// engineFailed counts a failed engine call and returns it as Unavailable.
func (s *Server) engineFailed(m *TextModel, err error) error {
	s.text.engineErr.WithLabelValues(m.Name).Inc()
	return status.Errorf(codes.Unavailable, "model %q: %v", m.Name, err)
}

// Tokenize shows what the router would hash for a prompt.
func (s *Server) Tokenize(_ context.Context, req *kvrouterv1.TokenizeRequest) (*kvrouterv1.TokenizeResponse, error) {
	var sp scoring.Prompt
	res, err := s.promptText(&sp, req.GetPrompt())
	if err != nil {
		return nil, err
	}
	out := &kvrouterv1.TokenizeResponse{Model: sp.Model, TokenIds: sp.Tokens, Tokenizer: "none"}
	if res != nil {
		out.Tokenizer, out.Rendered = res.source, res.rendered
	}
	if len(sp.BlockHashes) > 0 {
		out.BlockHashes = sp.BlockHashes
		return out, nil
	}
	if len(sp.MM) > 0 {
		return nil, status.Error(codes.InvalidArgument, "Tokenize does not hash prompts with mm_items")
	}
	if limit := s.tokenizeLimit(); len(sp.Tokens) > limit {
		return nil, status.Errorf(codes.InvalidArgument, "prompt has %d tokens, over --max-prompt-tokens %d", len(sp.Tokens), limit)
	}
	bs := scoring.DefaultConfig().BlockSize
	if s.text != nil {
		bs = s.text.blockSize
	}
	out.BlockSize = uint32(bs)
	out.BlockHashes = normalize.HashPrompt(normalize.Seed(sp.LoRAName, sp.CacheSalt), sp.Tokens, bs, nil, nil)
	return out, nil
}

func (s *Server) tokenizeLimit() int {
	if s.router != nil {
		return s.router.Limits().MaxPromptTokens
	}
	return scoring.DefaultConfig().MaxPromptTokens
}
