package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// An OpenAI-compatible HTTP front for simulated engines: POST
// /v1/completions and /v1/chat/completions, streaming (SSE) or not, one
// handler per data-parallel rank (rank r listens on its own port, as
// vLLM's do), the X-Data-Parallel-Rank header overriding it as in vLLM.
// The engine's simulated timing decides when the response is written: the
// first token at the end of prefill, the rest when the request finishes.

// RankHeader names the data-parallel rank that serves the request.
const RankHeader = "X-Data-Parallel-Rank"

// PromptTokenizer turns text prompts into token ids as the served model
// would. Without one the front accepts token ids only.
type PromptTokenizer interface {
	// CompletionTokens tokenizes a /v1/completions text prompt.
	CompletionTokens(model, prompt string) ([]uint32, error)
	// ChatTokens renders and tokenizes a /v1/chat/completions body.
	ChatTokens(body []byte) ([]uint32, error)
}

// Job is one request handed to a rank's Backend.
type Job struct {
	// ID is the request's X-Request-Id, else one the front made up.
	ID        string
	Rank      int
	Model     string
	Tokens    []uint32
	MaxTokens int
	Chat      bool
}

// Backend serves one rank's jobs on the engine's timing.
type Backend interface {
	// Serve runs j, calls first once its first output token exists, and
	// returns when it finishes, or with an error (ctx ended, refused).
	Serve(ctx context.Context, j *Job, first func()) error
}

// OpenAIConfig configures an OpenAI front.
type OpenAIConfig struct {
	// Ranks are the backends, rank r at index r; required.
	Ranks []Backend
	// Tokenizer, if set, accepts text prompts and chats.
	Tokenizer PromptTokenizer
	// MaxBodyBytes bounds a request body (default 16 MiB).
	MaxBodyBytes int64
	// DefaultMaxTokens is the output length when a body names none
	// (default 16).
	DefaultMaxTokens int
	// MaxTokensLimit bounds the output length a body may ask for, and so
	// the response's size (default 32768).
	MaxTokensLimit int
}

// ErrNoTokenizer answers a text prompt or a chat on a front without one.
var ErrNoTokenizer = errors.New("this engine has no tokenizer: send prompt as token ids to /v1/completions")

// OpenAIServer is the front. It is safe for concurrent use.
type OpenAIServer struct {
	cfg    OpenAIConfig
	nextID atomic.Uint64
}

// NewOpenAIServer returns a front for cfg.
func NewOpenAIServer(cfg OpenAIConfig) (*OpenAIServer, error) {
	if len(cfg.Ranks) == 0 {
		return nil, errors.New("engine: OpenAIConfig.Ranks is empty")
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 16 << 20
	}
	if cfg.DefaultMaxTokens == 0 {
		cfg.DefaultMaxTokens = 16
	}
	if cfg.MaxTokensLimit == 0 {
		cfg.MaxTokensLimit = 32768
	}
	if cfg.MaxBodyBytes < 0 || cfg.DefaultMaxTokens < 0 || cfg.MaxTokensLimit < cfg.DefaultMaxTokens {
		return nil, fmt.Errorf("engine: MaxBodyBytes %d, DefaultMaxTokens %d, MaxTokensLimit %d: want them >= 0 and the default within the limit",
			cfg.MaxBodyBytes, cfg.DefaultMaxTokens, cfg.MaxTokensLimit)
	}
	return &OpenAIServer{cfg: cfg}, nil
}

// Handler is the front of the listener of rank.
func (s *OpenAIServer) Handler(rank int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, rank, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, rank, true) })
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

func (s *OpenAIServer) serve(w http.ResponseWriter, r *http.Request, rank int, chat bool) {
	if v := r.Header.Get(RankHeader); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n >= len(s.cfg.Ranks) {
			openAIError(w, http.StatusBadRequest, fmt.Sprintf("%s %q: want 0 to %d", RankHeader, v, len(s.cfg.Ranks)-1))
			return
		}
		rank = n
	}
	req, status, err := s.parse(w, r, chat)
	if err != nil {
		openAIError(w, status, err.Error())
		return
	}
	j := &Job{ID: r.Header.Get("X-Request-Id"), Rank: rank, Model: req.Model, Tokens: req.tokens, MaxTokens: req.maxTokens, Chat: chat}
	if j.ID == "" {
		j.ID = "sim-" + strconv.FormatUint(s.nextID.Add(1), 10)
	}
	out := &responder{w: w, j: j, stream: req.Stream, usage: req.StreamOptions.IncludeUsage, created: time.Now().Unix()}
	out.start()
	err = s.cfg.Ranks[rank].Serve(r.Context(), j, out.first)
	out.finish(err)
}
