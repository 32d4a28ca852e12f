// Package engine is a simulated inference engine for benchmarks: a real ZMQ
// KV-event publisher (PUB plus ROUTER replay, like vLLM's) in front of one of
// two models of an engine.
//
// The old model (ModelOld) is an LRU block cache with a simple time model:
// a request carries its arrival time on the engine's clock and Serve answers
// when its prefill starts and ends and when it finishes. Prefills run one at
// a time in arrival order; decode runs beside them and never slows anything.
//
// The vLLM model (ModelVLLM) is vLLM V1's scheduler and block pool
// (Scheduler, BlockPool) stepped by the caller: Submit queues a request and
// each Step runs one batch, whose duration grows with what it holds. See
// docs/engine-model.md.
package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// Config configures an Engine.
type Config struct {
	// ID names the engine in logs.
	ID string
	// Endpoint is the PUB bind address (default "tcp://127.0.0.1:0").
	Endpoint string
	// ReplayEndpoint is the ROUTER bind address; empty disables replay.
	ReplayEndpoint string
	// Topic is the ZMQ topic frame.
	Topic string
	// DPRank is the data-parallel rank written into every batch.
	DPRank uint32
	// Format is the wire format (default vLLM map form).
	Format Format
	// BlockSize is tokens per block (default 16).
	BlockSize int
	// CapacityBlocks is the cache size in blocks; required.
	CapacityBlocks int
	// ReplayBuffer is how many recent batches replay can serve (default 10,000).
	ReplayBuffer int
	// HashSeed seeds the engine's block hashes, so that like real engines with
	// unpinned hash seeds, two engines give the same tokens different hashes.
	HashSeed uint64
	// PrefillPerToken is the simulated prefill time per uncached prompt token.
	PrefillPerToken time.Duration
	// PrefillBase is a fixed simulated cost per prefill.
	PrefillBase time.Duration
	// DecodePerToken is the simulated time per output token.
	DecodePerToken time.Duration
	// Model selects the engine model (default ModelOld).
	Model Model
	// MaxNumBatchedTokens, MaxNumSeqs and Step configure ModelVLLM's
	// scheduler (SchedConfig's defaults when zero).
	MaxNumBatchedTokens int
	MaxNumSeqs          int
	Step                StepModel
	// Logger receives warnings; nil discards.
	Logger *slog.Logger
	// Tokenizer encodes text prompts (Tokenize, ServeText); nil: token prompts only.
	Tokenizer *tokenizer.Tokenizer
	// ChatTemplate renders chat bodies (TokenizeBody); nil refuses them.
	ChatTemplate *chattemplate.Template
}

// Model selects how an engine schedules and times requests.
type Model int

// Engine models.
const (
	// ModelOld serves each request alone: one prefill at a time, decode free.
	ModelOld Model = iota
	// ModelVLLM is vLLM V1's step scheduler (Submit and Step).
	ModelVLLM
)

// ParseModel parses "old" or "vllm".
func ParseModel(s string) (Model, error) {
	switch s {
	case "old", "":
		return ModelOld, nil
	case "vllm":
		return ModelVLLM, nil
	}
	return 0, fmt.Errorf("unknown engine model %q (want old or vllm)", s)
}

func (m Model) String() string {
	if m == ModelVLLM {
		return "vllm"
	}
	return "old"
}

// Request is one request served by an engine.
type Request struct {
	// Tokens is the prompt.
	Tokens []uint32
	// OutputTokens is the number of tokens generated.
	OutputTokens int
	// Arrival is when the request reaches the engine, on the simulated clock.
	Arrival time.Duration
}

// Result is what serving a request did and when, on the simulated clock.
type Result struct {
	// PromptBlocks is the number of full blocks in the prompt.
	PromptBlocks int
	// CachedBlocks is how many leading prompt blocks were already cached.
	CachedBlocks int
	// StoredBlocks and EvictedBlocks are the cache changes made.
	StoredBlocks, EvictedBlocks int
	// UncachedTokens is the prompt tokens prefilled (the partial last block is never cached).
	UncachedTokens int
	// Start, PrefillDone and Finish are simulated times; TTFT is PrefillDone - Arrival.
	Start, PrefillDone, Finish time.Duration
	// Events are the KV events the request caused, ready for Publish.
	Events []Event
}

// TTFT is the simulated time to first token.
func (r Result) TTFT(arrival time.Duration) time.Duration { return r.PrefillDone - arrival }

// Stats are an engine's running totals.
type Stats struct {
	Requests        uint64
	PromptBlocks    uint64
	CachedBlocks    uint64
	PromptTokens    uint64
	StoredBlocks    uint64
	EvictedBlocks   uint64
	Batches         uint64
	Events          uint64
	CachedNow       int
	ReplayRequests  uint64
	ReplayMalformed uint64
	// Preemptions counts ModelVLLM's preemptions.
	Preemptions uint64
}

// Engine is one simulated engine (one data-parallel rank). It is safe for
// concurrent use.
type Engine struct {
	cfg Config
	pub atomic.Pointer[Publisher] // replaced by Restart

	mu        sync.Mutex
	cache     *Cache
	sched     *Scheduler // ModelVLLM only
	busyUntil time.Duration
	stats     Stats
	hashes    []uint64 // scratch
}

// New starts an engine and binds its sockets.
func New(cfg Config) (*Engine, error) {
	if cfg.CapacityBlocks <= 0 {
		return nil, fmt.Errorf("engine %s: capacity must be positive, got %d", cfg.ID, cfg.CapacityBlocks)
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 16
	}
	if cfg.BlockSize < 0 {
		return nil, fmt.Errorf("engine %s: negative block size %d", cfg.ID, cfg.BlockSize)
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = "tcp://127.0.0.1:0"
	}
	pub, err := NewPublisher(publisherConfig(cfg, cfg.Endpoint, cfg.ReplayEndpoint))
	if err != nil {
		return nil, fmt.Errorf("engine %s: %w", cfg.ID, err)
	}
	e := &Engine{cfg: cfg, cache: NewCache(cfg.CapacityBlocks)}
	if cfg.Model == ModelVLLM {
		if e.sched, err = NewScheduler(SchedConfig{
			NumBlocks: cfg.CapacityBlocks, BlockSize: cfg.BlockSize, HashSeed: cfg.HashSeed,
			MaxNumBatchedTokens: cfg.MaxNumBatchedTokens, MaxNumSeqs: cfg.MaxNumSeqs, Step: cfg.Step,
		}); err != nil {
			pub.Close()
			return nil, fmt.Errorf("engine %s: %w", cfg.ID, err)
		}
	}
	e.pub.Store(pub)
	return e, nil
}

// publisherConfig is an engine's publisher configuration on endpoints ep and rep.
func publisherConfig(cfg Config, ep, rep string) PublisherConfig {
	return PublisherConfig{Endpoint: ep, ReplayEndpoint: rep, Topic: cfg.Topic, ReplayBuffer: cfg.ReplayBuffer, Logger: cfg.Logger}
}

// Restart simulates the engine's process restarting: its sockets close and
// bind again on the same addresses, the new publisher's seq starts from 0
// with an empty replay buffer, and the cache is empty (a new process does not
// announce what the old one held, so nothing is published). Call it only
// between requests: no Serve may be waiting for its Publish.
func (e *Engine) Restart() error {
	old := e.pub.Load()
	ep, rep := old.Endpoint(), old.ReplayEndpoint()
	if err := old.Close(); err != nil {
		return fmt.Errorf("engine %s: restart: %w", e.cfg.ID, err)
	}
	var (
		pub *Publisher
		err error
	)
	// The old sockets' ports may take a moment to be free again.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if pub, err = NewPublisher(publisherConfig(e.cfg, ep, rep)); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("engine %s: restart: %w", e.cfg.ID, err)
	}
	e.pub.Store(pub)
	e.mu.Lock()
	e.resetLocked()
	e.mu.Unlock()
	return nil
}

func (e *Engine) resetLocked() {
	e.cache.Reset()
	if e.sched != nil {
		e.sched.Reset()
	}
	e.busyUntil = 0
}

// ID is the engine's configured name.
func (e *Engine) ID() string { return e.cfg.ID }

// Endpoint is the PUB address subscribers connect to.
func (e *Engine) Endpoint() string { return e.pub.Load().Endpoint() }

// ReplayEndpoint is the ROUTER replay address, or "".
func (e *Engine) ReplayEndpoint() string { return e.pub.Load().ReplayEndpoint() }

// Publisher is the engine's ZMQ publisher (a new one after Restart).
func (e *Engine) Publisher() *Publisher { return e.pub.Load() }

// BlockHashes returns the engine's chained block hashes of the full blocks of
// tokens: hash i covers blocks 0..i, so equal prefixes hash equally.
func (e *Engine) BlockHashes(tokens []uint32, dst []uint64) []uint64 {
	return ChainHashes(e.cfg.HashSeed, e.cfg.BlockSize, tokens, dst)
}

// ChainHashes appends to dst the chained hash of every full block of tokens:
// h(i) = xxhash64(seed, h(i-1), tokens of block i).
func ChainHashes(seed uint64, blockSize int, tokens []uint32, dst []uint64) []uint64 {
	var buf [8 + 8 + 4*64]byte
	parent := uint64(0)
	for off := 0; off+blockSize <= len(tokens); off += blockSize {
		d := xxhash.NewWithSeed(seed)
		binary.LittleEndian.PutUint64(buf[:8], parent)
		d.Write(buf[:8])
		blk := tokens[off : off+blockSize]
		for len(blk) > 0 {
			n := min(len(blk), 64)
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint32(buf[8+4*i:], blk[i])
			}
			d.Write(buf[8 : 8+4*n])
			blk = blk[n:]
		}
		parent = d.Sum64()
		dst = append(dst, parent)
	}
	return dst
}

// Serve is the old model (ModelOld) only: on a ModelVLLM engine use Submit
// and Step. It looks the prompt up in the cache, stores its missing blocks (evicting
// the least recently used as needed) and computes its simulated timing. The
// returned Events describe the cache changes; pass them to Publish when the
// engine would emit them (at Result.Start). Serve does not publish. A stored
// event's Tokens alias req.Tokens, which must not change until then.
func (e *Engine) Serve(req Request) Result {
	e.mu.Lock()
	defer e.mu.Unlock()
	bs := e.cfg.BlockSize
	e.hashes = e.BlockHashes(req.Tokens, e.hashes[:0])
	h := e.hashes
	n := len(h)
	hit, stored, removed := e.cache.Access(h, nil)
	k := hit + stored
	res := Result{
		PromptBlocks:   n,
		CachedBlocks:   hit,
		StoredBlocks:   k - hit,
		EvictedBlocks:  len(removed),
		UncachedTokens: len(req.Tokens) - hit*bs,
	}
	if len(removed) > 0 {
		res.Events = append(res.Events, Event{Kind: Removed, Hashes: removed})
	}
	if k > hit {
		ev := Event{
			Kind:      Stored,
			Hashes:    append([]uint64(nil), h[hit:k]...),
			Tokens:    req.Tokens[hit*bs : k*bs],
			BlockSize: bs,
		}
		if hit > 0 {
			ev.HasParent, ev.Parent = true, h[hit-1]
		}
		res.Events = append(res.Events, ev)
	}
	res.Start = max(req.Arrival, e.busyUntil)
	res.PrefillDone = res.Start + e.cfg.PrefillBase + time.Duration(res.UncachedTokens)*e.cfg.PrefillPerToken
	e.busyUntil = res.PrefillDone
	res.Finish = res.PrefillDone + time.Duration(req.OutputTokens)*e.cfg.DecodePerToken

	e.stats.Requests++
	e.stats.PromptBlocks += uint64(n)
	e.stats.CachedBlocks += uint64(hit)
	e.stats.PromptTokens += uint64(len(req.Tokens))
	e.stats.StoredBlocks += uint64(k - hit)
	e.stats.EvictedBlocks += uint64(len(removed))
	return res
}

// Publish encodes events as one batch and publishes it. Publishing no events
// is a no-op.
func (e *Engine) Publish(events []Event) error {
	if len(events) == 0 {
		return nil
	}
	payload, err := Encode(e.cfg.Format, time.Now(), e.cfg.DPRank, events)
	if err != nil {
		return fmt.Errorf("engine %s: %w", e.cfg.ID, err)
	}
	if _, err := e.pub.Load().Publish(payload); err != nil {
		return fmt.Errorf("engine %s: %w", e.cfg.ID, err)
	}
	e.mu.Lock()
	e.stats.Batches++
	e.stats.Events += uint64(len(events))
	e.mu.Unlock()
	return nil
}

// ServeAndPublish serves req and publishes its events at once.
func (e *Engine) ServeAndPublish(req Request) (Result, error) {
	res := e.Serve(req)
	return res, e.Publish(res.Events)
}

// Reset empties the cache, restarts the simulated clock at zero and
// publishes AllBlocksCleared.
func (e *Engine) Reset() error {
	e.mu.Lock()
	e.resetLocked()
	e.mu.Unlock()
	return e.Publish([]Event{{Kind: Cleared}})
}

// Stats returns the engine's running totals.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	s := e.stats
	s.CachedNow = e.cache.Len()
	if e.sched != nil {
		st := e.sched.Stats()
		s.Requests, s.PromptBlocks, s.CachedBlocks = st.Admitted, st.PromptBlocks, st.HitBlocks
		s.StoredBlocks, s.EvictedBlocks, s.Preemptions = st.Stored, st.Evicted, st.Preemptions
		s.CachedNow = e.sched.Pool().NumCached()
	}
	e.mu.Unlock()
	s.ReplayRequests, s.ReplayMalformed = e.pub.Load().ReplayStats()
	return s
}

// Close closes the engine's sockets.
func (e *Engine) Close() error {
	pub := e.pub.Load()
	if pub == nil {
		return errors.New("engine: not started")
	}
	return pub.Close()
}

// Overlap is how many leading hashes of h the engine's cache holds, without
// changing recency.
func (e *Engine) Overlap(h []uint64) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	if e.sched != nil {
		for n < len(h) {
			if _, ok := e.sched.Pool().Lookup(h[n]); !ok {
				break
			}
			n++
		}
		return n
	}
	for n < len(h) && e.cache.Contains(h[n]) {
		n++
	}
	return n
}

// Model is the engine's model.
func (e *Engine) Model() Model { return e.cfg.Model }

// Submit queues request id on a ModelVLLM engine's scheduler; its tokens
// must not change until it finishes. The returned error wraps ErrTooLong
// for a request the engine could never hold.
func (e *Engine) Submit(id uint64, req Request) error {
	if e.sched == nil {
		return fmt.Errorf("engine %s: Submit needs the vllm model", e.cfg.ID)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.sched.Add(id, req.Tokens, req.OutputTokens); err != nil {
		return fmt.Errorf("engine %s: %w", e.cfg.ID, err)
	}
	e.stats.PromptTokens += uint64(len(req.Tokens))
	return nil
}

// Step runs one step of a ModelVLLM engine's scheduler. Pass the result's
// Events to Publish at the step's end. On a ModelOld engine it does nothing.
func (e *Engine) Step() StepResult {
	if e.sched == nil {
		return StepResult{}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sched.Step()
}

// HasWork reports whether a ModelVLLM engine has requests waiting or running.
func (e *Engine) HasWork() bool {
	if e.sched == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sched.HasWork()
}
