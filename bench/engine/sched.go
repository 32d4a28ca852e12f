package engine

import (
	"errors"
	"fmt"
	"time"
)

// ErrTooLong is returned for a request whose prompt and output could never
// fit in the engine's KV blocks (vLLM refuses it at admission too).
var ErrTooLong = errors.New("engine: request needs more KV blocks than the engine has")

// SchedConfig configures a Scheduler.
type SchedConfig struct {
	// NumBlocks is the KV block pool's size; required.
	NumBlocks int
	// BlockSize is tokens per block (default 16).
	BlockSize int
	// MaxNumBatchedTokens is the token budget of one step (default
	// DefaultMaxNumBatchedTokens, vLLM's default for its API server on
	// large-memory GPUs such as the H100).
	MaxNumBatchedTokens int
	// MaxNumSeqs bounds the running requests (default DefaultMaxNumSeqs, likewise).
	MaxNumSeqs int
	// Step times a step (default Llama31H100).
	Step StepModel
	// HashSeed seeds the block hashes (see Config.HashSeed).
	HashSeed uint64
}

// Defaults of SchedConfig.
const (
	DefaultMaxNumBatchedTokens = 8192
	DefaultMaxNumSeqs          = 1024
)

func (c *SchedConfig) setDefaults() {
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if c.Step == (StepModel{}) {
		c.Step = Llama31H100
	}
}

// Validate reports a configuration the scheduler cannot run.
func (c SchedConfig) Validate() error {
	switch {
	case c.NumBlocks <= 0:
		return fmt.Errorf("engine: KV blocks must be positive, got %d", c.NumBlocks)
	case c.BlockSize <= 0:
		return fmt.Errorf("engine: block size must be positive, got %d", c.BlockSize)
	case c.MaxNumBatchedTokens <= 0:
		return fmt.Errorf("engine: max-num-batched-tokens must be positive, got %d", c.MaxNumBatchedTokens)
	case c.MaxNumSeqs <= 0:
		return fmt.Errorf("engine: max-num-seqs must be positive, got %d", c.MaxNumSeqs)
	}
	return nil
}

// Scheduler is vLLM V1's scheduler as a state machine doing no I/O: requests
// are added to a waiting queue; each Step forms one batch under a token
// budget (running requests first, then waiting ones, whose prefills are
// chunked into what budget is left), advances every scheduled request and
// reports the step's duration, the KV events it caused and which requests
// produced their first token or finished. It is not safe for concurrent use.
type Scheduler struct {
	cfg     SchedConfig
	pool    *BlockPool
	waiting []*seq
	running []*seq
	stats   SchedStats
	events  []Event
}

// SchedStats are a scheduler's running totals.
type SchedStats struct {
	// Admitted counts requests on their first admission; PromptBlocks and
	// HitBlocks are their full prompt blocks and the prefix-cache hits then.
	Admitted, PromptBlocks, HitBlocks uint64
	Stored, Evicted                   uint64
	Preemptions                       uint64
	Steps                             uint64
}

type seq struct {
	id        uint64
	tokens    []uint32
	hashes    []uint64
	maxOut    int
	numOut    int
	computed  int // tokens whose KV is computed
	blocks    []int32
	hashedTo  int // prompt blocks of blocks already offered to the cache
	first     bool
	admitted  bool
	preempted int
}

func (r *seq) numTokens() int { return len(r.tokens) + r.numOut }

// StepResult is what one step did.
type StepResult struct {
	// Duration is the step's simulated time; the step's tokens exist at its end.
	Duration time.Duration
	// PrefillTokens, DecodeSeqs and KVTokens are the batch the step model saw.
	PrefillTokens, DecodeSeqs, KVTokens int
	// Batch lists the scheduled requests and their tokens, in batch order.
	Batch []BatchEntry
	// FirstToken lists requests whose first output token this step produced.
	FirstToken []uint64
	// Finished lists requests that produced their last token (their blocks are freed).
	Finished []uint64
	// Preempted lists requests preempted this step (back to waiting, recomputed later).
	Preempted []uint64
	// Events are the KV events of the step, in order.
	Events []Event
}

// BatchEntry is one request's share of a step.
type BatchEntry struct {
	ID     uint64
	Tokens int
}

// NewScheduler returns an idle scheduler with an empty pool.
func NewScheduler(cfg SchedConfig) (*Scheduler, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Scheduler{cfg: cfg, pool: NewBlockPool(cfg.NumBlocks)}, nil
}

// Config is the scheduler's configuration with defaults applied.
func (s *Scheduler) Config() SchedConfig { return s.cfg }

// Pool is the scheduler's block pool (read it, do not change it).
func (s *Scheduler) Pool() *BlockPool { return s.pool }

// Stats returns the running totals.
func (s *Scheduler) Stats() SchedStats { return s.stats }

// HasWork reports whether any request is waiting or running.
func (s *Scheduler) HasWork() bool { return len(s.waiting)+len(s.running) > 0 }

// Waiting and Running are the queue lengths.
func (s *Scheduler) Waiting() int { return len(s.waiting) }
func (s *Scheduler) Running() int { return len(s.running) }

// Reset drops every request and empties the pool, without events.
func (s *Scheduler) Reset() {
	s.waiting, s.running = nil, nil
	s.pool.Reset()
}

// Add queues a request. tokens must not change until it finishes. A request
// generates at least one token.
func (s *Scheduler) Add(id uint64, tokens []uint32, outputTokens int) error {
	outputTokens = max(outputTokens, 1)
	bs := s.cfg.BlockSize
	if need := (len(tokens) + outputTokens + bs - 1) / bs; need > s.cfg.NumBlocks {
		return fmt.Errorf("%w: %d tokens need %d blocks, the engine has %d", ErrTooLong, len(tokens)+outputTokens, need, s.cfg.NumBlocks)
	}
	s.waiting = append(s.waiting, &seq{
		id: id, tokens: tokens, maxOut: outputTokens,
		hashes: ChainHashes(s.cfg.HashSeed, bs, tokens, nil),
	})
	return nil
}

type scheduled struct {
	r *seq
	n int
}

// Step forms and runs one batch. With nothing to do it returns a zero result.
func (s *Scheduler) Step() StepResult {
	var res StepResult
	s.events = nil
	if !s.HasWork() {
		return res
	}
	budget := s.cfg.MaxNumBatchedTokens
	var batch []scheduled
	batch, budget = s.scheduleRunning(batch, budget, &res)
	if len(res.Preempted) == 0 {
		batch = s.scheduleWaiting(batch, budget)
	}
	s.stats.Steps++
	for _, b := range batch {
		if b.n == 1 && b.r.numOut > 0 && b.r.computed == b.r.numTokens()-1 {
			res.DecodeSeqs++
		} else {
			res.PrefillTokens += b.n
		}
		res.KVTokens += b.r.computed + b.n
		res.Batch = append(res.Batch, BatchEntry{ID: b.r.id, Tokens: b.n})
	}
	res.Duration = s.cfg.Step.Duration(res.PrefillTokens, res.DecodeSeqs, res.KVTokens)
	s.advance(batch, &res)
	res.Events = s.events
	return res
}

// scheduleRunning gives each running request, in order, the tokens it
// needs (one when decoding, the rest of its prefill chunked to the budget),
// preempting from the back of the queue when blocks run out.
func (s *Scheduler) scheduleRunning(batch []scheduled, budget int, res *StepResult) ([]scheduled, int) {
	for i := 0; i < len(s.running) && budget > 0; i++ {
		r := s.running[i]
		n := min(r.numTokens()-r.computed, budget)
		if n <= 0 {
			continue
		}
		ok := false
		for !ok {
			if ok = s.grow(r, n); ok {
				break
			}
			victim := s.running[len(s.running)-1]
			s.running = s.running[:len(s.running)-1]
			s.preempt(victim)
			res.Preempted = append(res.Preempted, victim.id)
			if victim == r {
				break
			}
		}
		if !ok {
			break
		}
		batch = append(batch, scheduled{r, n})
		budget -= n
	}
	return batch, budget
}

// scheduleWaiting admits waiting requests in order while the budget, the
// sequence limit and the free blocks allow, reusing their cached prefix.
func (s *Scheduler) scheduleWaiting(batch []scheduled, budget int) []scheduled {
	bs := s.cfg.BlockSize
	for len(s.waiting) > 0 && budget > 0 && len(s.running) < s.cfg.MaxNumSeqs {
		r := s.waiting[0]
		// The last prompt token is always computed, to produce logits.
		maxHit := (r.numTokens() - 1) / bs
		var hit []int32
		for len(hit) < min(maxHit, len(r.hashes)) {
			b, ok := s.pool.Lookup(r.hashes[len(hit)])
			if !ok {
				break
			}
			hit = append(hit, b)
		}
		n := min(r.numTokens()-len(hit)*bs, budget)
		need := (len(hit)*bs+n+bs-1)/bs - len(hit)
		freeHits := 0
		for _, b := range hit {
			if s.pool.Refs(b) == 0 {
				freeHits++
			}
		}
		if need > s.pool.NumFree()-freeHits {
			break
		}
		s.pool.Touch(hit)
		r.blocks = append(r.blocks[:0], hit...)
		r.blocks, _ = s.pool.Allocate(need, r.blocks)
		s.noteEvictions()
		r.computed, r.hashedTo = len(hit)*bs, len(hit)
		if !r.admitted {
			r.admitted = true
			s.stats.Admitted++
			s.stats.PromptBlocks += uint64(len(r.hashes))
			s.stats.HitBlocks += uint64(len(hit))
		}
		s.waiting = s.waiting[1:]
		s.running = append(s.running, r)
		batch = append(batch, scheduled{r, n})
		budget -= n
	}
	return batch
}

// grow gives r the blocks for n more tokens, or reports false taking none.
func (s *Scheduler) grow(r *seq, n int) bool {
	bs := s.cfg.BlockSize
	need := (r.computed+n+bs-1)/bs - len(r.blocks)
	if need <= 0 {
		return true
	}
	var ok bool
	if r.blocks, ok = s.pool.Allocate(need, r.blocks); !ok {
		return false
	}
	s.noteEvictions()
	return true
}

// preempt frees r's blocks (tail first) and puts it back at the head of the
// waiting queue; it will recompute from whatever of its prefix stays cached.
func (s *Scheduler) preempt(r *seq) {
	s.freeBlocks(r)
	r.computed, r.hashedTo = 0, 0
	r.preempted++
	s.stats.Preemptions++
	s.waiting = append([]*seq{r}, s.waiting...)
}

func (s *Scheduler) freeBlocks(r *seq) {
	for i, j := 0, len(r.blocks)-1; i < j; i, j = i+1, j-1 {
		r.blocks[i], r.blocks[j] = r.blocks[j], r.blocks[i]
	}
	s.pool.Free(r.blocks)
	r.blocks = r.blocks[:0]
}

// advance applies the batch's computation: newly full prompt blocks enter
// the prefix cache, a request whose tokens are all computed emits a token,
// and a request with all its tokens finishes and frees its blocks.
func (s *Scheduler) advance(batch []scheduled, res *StepResult) {
	done := map[*seq]bool{}
	for _, b := range batch {
		r := b.r
		r.computed += b.n
		s.cacheFull(r)
		if r.computed < r.numTokens() {
			continue
		}
		r.numOut++
		if !r.first {
			r.first = true
			res.FirstToken = append(res.FirstToken, r.id)
		}
		if r.numOut >= r.maxOut {
			done[r] = true
			res.Finished = append(res.Finished, r.id)
			s.freeBlocks(r)
		}
	}
	if len(done) == 0 {
		return
	}
	kept := s.running[:0]
	for _, r := range s.running {
		if !done[r] {
			kept = append(kept, r)
		}
	}
	clear(s.running[len(kept):])
	s.running = kept
}

// cacheFull offers r's newly full prompt blocks to the prefix cache and
// records a BlockStored for each run of blocks it took.
func (s *Scheduler) cacheFull(r *seq) {
	bs := s.cfg.BlockSize
	full := min(r.computed/bs, len(r.hashes))
	start := -1
	flush := func(end int) {
		if start < 0 {
			return
		}
		ev := Event{Kind: Stored, Hashes: append([]uint64(nil), r.hashes[start:end]...),
			Tokens: r.tokens[start*bs : end*bs], BlockSize: bs}
		if start > 0 {
			ev.HasParent, ev.Parent = true, r.hashes[start-1]
		}
		s.events = append(s.events, ev)
		s.stats.Stored += uint64(end - start)
		start = -1
	}
	for i := r.hashedTo; i < full; i++ {
		if s.pool.Cache(r.blocks[i], r.hashes[i]) {
			if start < 0 {
				start = i
			}
			continue
		}
		flush(i)
	}
	flush(full)
	r.hashedTo = max(r.hashedTo, full)
}

func (s *Scheduler) noteEvictions() {
	if rm := s.pool.TakeRemoved(); len(rm) > 0 {
		s.events = append(s.events, Event{Kind: Removed, Hashes: rm})
		s.stats.Evicted += uint64(len(rm))
	}
}
