package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// Config configures a Manager.
type Config struct {
	// Index receives every worker/rank's blocks. Required.
	Index *radix.Index
	// BlockSize is the router's block size in tokens. Required.
	BlockSize int
	// Logger receives connection, gap, replay and restart events (nil: discard).
	Logger *slog.Logger
	// Registerer registers the ingest metrics (nil: no metrics).
	Registerer prometheus.Registerer
	// QueueDepth bounds each rank's queue of received batches (0: 256). A
	// full queue stops the reader, so a slow index back-pressures the engine.
	QueueDepth int
	// ReconnectMin and ReconnectMax bound the reconnect backoff
	// (0: 50ms and 5s).
	ReconnectMin, ReconnectMax time.Duration
	// DialTimeout bounds one TCP connect (0: 5s).
	DialTimeout time.Duration
	// ReplayTimeout is how long a replay waits for each reply (0: 5s).
	ReplayTimeout time.Duration
	// KeepAlive is the TCP keepalive idle time; a silent dead peer is noticed
	// after about twice this (0: 5s).
	KeepAlive time.Duration
	// StopTimeout bounds how long Remove and Close wait for a worker's
	// goroutines (0: 10s). Neither holds the Manager's lock while waiting.
	// Past it, the goroutines are left to exit on their own, but write
	// nothing more to the index (see writeGate).
	StopTimeout time.Duration
	// MaxMessageBytes bounds one received ZMTP message, all its frames
	// (0: 16 MiB). A larger one drops the connection (counted in
	// malformed_total{reason="size"}); a message's memory grows as its
	// bytes arrive, whatever its header announces.
	MaxMessageBytes int64
	// MaxBatchEvents bounds the events of one batch (0: 16384, normalize's
	// default). A batch with more does not decode (decode_errors_total):
	// it is a gap.
	MaxBatchEvents int
	// QueueBytes bounds the payload bytes queued across every rank of the
	// Manager (0: 128 MiB; at least MaxMessageBytes). A rank that cannot
	// queue a batch within it stops reading until appliers catch up, which
	// back-pressures its publisher over TCP (queue_budget_waits_total).
	QueueBytes int64
	// HandshakeTimeout bounds a connection's ZMTP greeting and READY
	// exchange (0: 5s); FrameTimeout is how long a message that has started
	// may go without a byte arriving (0: 10s). Either drops the connection
	// (connections_dropped_total{reason="handshake"|"stalled"}).
	HandshakeTimeout, FrameTimeout time.Duration
	// MaxHandshakes bounds the handshakes in progress on a bound rank (0: 4);
	// more connections are refused (connections_dropped_total{reason=
	// "handshakes"}), as is any connection while a publisher is live
	// ({reason="second_publisher"}).
	MaxHandshakes int
	// CatchUpInterval rate-limits full catch-ups (a replay from seq 0 on
	// connect) per rank (0: 30s; negative: no limit). A connection within
	// it asks the replay from the last applied seq instead, or nothing when
	// the rank holds nothing (catch_ups_limited_total).
	CatchUpInterval time.Duration
	// Resume gives the snapshot position of a worker/rank restored into
	// Index (nil: none). Add asks it for each rank of a worker the first
	// time that worker ID is added: the index must then hold what
	// Checkpoint exported for the rank (its indexRanks) as of Position.Seq.
	// The rank asks the engine to replay from there, and
	// RankStatus.Restore says what came of it. A rank it has no position
	// for (false, or no seq) starts as new, as does a worker added again
	// after Remove (Remove dropped its blocks). The worker's index ranks at
	// or above its DPSize (ranks its batches named) are rank 0's to clear.
	// Restored ranks no worker is added for are the caller's to drop.
	Resume func(kv.WorkerRank) (Position, bool)

	// newSink replaces the index sink (tests).
	newSink func(w kv.WorkerRank) sink
}

// Worker is one engine to follow.
type Worker struct {
	// ID names the worker in the index.
	ID string
	// Model is the served model (informational).
	Model string
	// KVEndpoint is the rank 0 PUB endpoint; see ParseEndpoint.
	KVEndpoint string
	// ReplayEndpoint is the rank 0 ROUTER replay endpoint ("" if none),
	// always dialled (a wildcard host at loopback).
	ReplayEndpoint string
	// Topic is the topic prefix to subscribe to ("" for everything).
	Topic string
	// DPSize is the number of data-parallel ranks (0 means 1).
	DPSize int
	// CapacityTokens is one rank's KV cache size in tokens (0: unknown,
	// learned; see RankStatus.CapacityBlocks).
	CapacityTokens uint64
	// RankKVEndpoints and RankReplayEndpoints, when set, give each rank's
	// endpoints (DPSize entries) instead of the rank 0 endpoint's port +
	// rank, for data-parallel groups that span hosts.
	RankKVEndpoints, RankReplayEndpoints []string
}

// Position is what a rank has applied, as Checkpoint reports it and
// Config.Resume gives it back: the index holds the rank's blocks as of it.
type Position struct {
	// HasSeq: the rank holds batches (false: nothing applied since the
	// rank started or was last cleared; Seq and Sum are zero).
	HasSeq bool
	// Seq is the last applied batch's seq.
	Seq uint64
	// Sum is the XXH64 of that batch's payload: a restarted engine's batch
	// at the same seq differs.
	Sum uint64
	// Epoch is the SGLang topic epoch (the sgl-kv-epoch= suffix) of the
	// engine followed; empty if its topics have none.
	Epoch string
}

// RankStatus is one worker/rank's subscription state.
type RankStatus struct {
	DPRank uint32
	// Connected reports a live ZMTP connection to the engine's publisher.
	Connected bool
	// LastSeq is the last sequence number applied (0 after an engine
	// restart until the new incarnation's first batch; a resumed rank's
	// restored seq until it applies one).
	LastSeq uint64
	// EventsApplied counts normalized events applied to the index.
	EventsApplied uint64
	// Gaps counts sequence gaps seen on the live stream.
	Gaps uint64
	// Replays counts replay requests (catch-ups on connect and gap fills).
	Replays uint64
	// ReplayFailures counts gaps nothing could fill (the rank kept its
	// blocks and became inexact) and replay requests that failed.
	ReplayFailures uint64
	// EngineRestarts counts detected engine restarts (the rank was cleared).
	EngineRestarts uint64
	// Reconnects counts connections made after the first.
	Reconnects uint64
	// DecodeErrors counts malformed messages, undecodable batches and
	// undecodable events.
	DecodeErrors uint64
	// Dropped counts connections refused or dropped for a limit: a second
	// publisher, too many handshakes, a handshake or a message that did not
	// make progress in time.
	Dropped uint64
	// CatchUpsLimited counts connections that did not catch up from seq 0
	// because one had less than CatchUpInterval ago.
	CatchUpsLimited uint64
	// BudgetWaits counts batches whose reader waited for the queue budget.
	BudgetWaits uint64
	// CachedBlocks is the number of blocks the rank holds in the index.
	CachedBlocks uint64
	// Restore is what came of a rank started from Config.Resume: "" (not
	// restored, or not decided yet), "restored" (the engine continued the
	// snapshot's stream: nothing lost), "rebuilt" (its history no longer
	// reached the restored seq + 1: the snapshot's blocks kept, inexact),
	// "reset" (the engine restarted meanwhile: cleared, following the new
	// incarnation), "kept" (no replay; the first live seq followed the
	// restored one) or "cleared" (no replay, or it failed, and the first
	// live batch was at or below the restored seq: cleared).
	Restore string
	// CaughtUp reports that the rank's first connection's catch-up (the
	// replay of its engine's buffer from the restored or last seq) is over,
	// whatever came of it, or that the engine has no replay endpoint and the
	// rank is connected: from then on the rank holds what the engine
	// reported, as far as the engine still had it.
	CaughtUp bool
	// Inexact is set when history was lost (a gap nothing could fill, a
	// batch that does not decode, a restore the engine's history no longer
	// reached) and the rank kept its blocks: it may claim blocks the engine
	// evicted meanwhile, and lack some it stored. InexactSinceSeq is the
	// first seq lost. A clear (an engine restart, AllBlocksCleared) makes
	// the rank exact again.
	Inexact         bool
	InexactSinceSeq uint64
	// CapacityBlocks bounds what an inexact rank claims, in router blocks:
	// Worker.CapacityTokens over the block size, or the most blocks the rank
	// held while exact (0: not known yet). Evictions counts the claims an
	// inexact rank dropped for it, oldest first.
	CapacityBlocks uint64
	Evictions      uint64
	// Problems lists why the rank's events are being refused, by reason
	// (nil: none so far).
	Problems []Problem
}

// Manager keeps one subscription per registered worker and rank.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics // nil: no metrics
	ctx     context.Context
	cancel  context.CancelFunc

	budget *budget

	mu      sync.Mutex
	workers map[string]*worker
	added   map[string]bool // every worker ID Add started (Resume is asked once)
	// retiring holds the IDs Remove took out of workers whose blocks are
	// not removed from the index yet (a write of theirs is still in
	// progress); Add refuses them.
	retiring map[string]bool
	closed   bool
}

type worker struct {
	w     Worker
	ranks []*rank
	gate  *writeGate // every index write of the ranks passes it
}

// New returns a Manager with no workers.
func New(cfg Config) (*Manager, error) {
	if cfg.Index == nil && cfg.newSink == nil {
		return nil, errors.New("ingest: Config.Index is nil")
	}
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("ingest: Config.BlockSize %d: must be positive", cfg.BlockSize)
	}
	if cfg.QueueDepth < 0 {
		return nil, fmt.Errorf("ingest: Config.QueueDepth %d: must not be negative", cfg.QueueDepth)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = 256
	}
	def(&cfg.ReconnectMin, 50*time.Millisecond)
	def(&cfg.ReconnectMax, 5*time.Second)
	if cfg.ReconnectMax < cfg.ReconnectMin {
		cfg.ReconnectMax = cfg.ReconnectMin
	}
	def(&cfg.DialTimeout, 5*time.Second)
	def(&cfg.ReplayTimeout, 5*time.Second)
	def(&cfg.KeepAlive, 5*time.Second)
	def(&cfg.StopTimeout, 10*time.Second)
	def(&cfg.HandshakeTimeout, 5*time.Second)
	def(&cfg.FrameTimeout, 10*time.Second)
	if cfg.CatchUpInterval == 0 {
		cfg.CatchUpInterval = 30 * time.Second
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = defaultMaxMessageBytes
	}
	if cfg.MaxBatchEvents <= 0 {
		cfg.MaxBatchEvents = normalize.DefaultMaxEvents
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 128 << 20
	}
	cfg.QueueBytes = max(cfg.QueueBytes, cfg.MaxMessageBytes)
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = 4
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, workers: make(map[string]*worker), added: make(map[string]bool),
		retiring: make(map[string]bool)}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer != nil {
		met, err := newMetrics(cfg.Registerer)
		if err != nil {
			return nil, fmt.Errorf("ingest: metrics: %w", err)
		}
		if err := cfg.Registerer.Register(newRankCollector(m)); err != nil {
			return nil, fmt.Errorf("ingest: metrics: %w", err)
		}
		m.metrics = met
	}
	var gauge prometheus.Gauge
	if m.metrics != nil {
		gauge = m.metrics.queuedBytes
	}
	m.budget = newBudget(cfg.QueueBytes, gauge)
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// Errors of Add, for errors.Is.
var (
	ErrRegistered = errors.New("already registered")
	// ErrRemoving: the worker's previous subscriptions are still stopping;
	// Add may be tried again.
	ErrRemoving = errors.New("still being removed")
)

// Add starts following w: one subscription per rank. It fails if the worker
// is already registered, an endpoint is invalid, or a bind fails.
func (m *Manager) Add(w Worker) error {
	if w.ID == "" {
		return errors.New("ingest: worker ID is empty")
	}
	if w.DPSize < 0 || w.DPSize > kv.MaxDPSize {
		return fmt.Errorf("ingest: worker %q: dp size %d out of range [0, %d]", w.ID, w.DPSize, kv.MaxDPSize)
	}
	if w.DPSize == 0 {
		w.DPSize = 1
	}
	if err := w.checkRankEndpoints(); err != nil {
		return fmt.Errorf("ingest: worker %q: %w", w.ID, err)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("ingest: manager is closed")
	}
	if _, dup := m.workers[w.ID]; dup {
		return fmt.Errorf("ingest: worker %q is %w", w.ID, ErrRegistered)
	}
	if m.retiring[w.ID] {
		return fmt.Errorf("ingest: worker %q is %w (a stopped subscription is finishing a write); try again", w.ID, ErrRemoving)
	}

	ranks := make([]*rank, 0, w.DPSize)
	stopAll := func() {
		for _, r := range ranks {
			r.stop()
		}
	}
	resume := m.cfg.Resume != nil && !m.added[w.ID]
	gate := &writeGate{}
	for dp := 0; dp < w.DPSize; dp++ {
		r, err := m.newRank(w, dp, resume, gate)
		if err != nil {
			stopAll()
			return fmt.Errorf("ingest: worker %q rank %d: %w", w.ID, dp, err)
		}
		if err := r.listen(m.ctx); err != nil {
			stopAll()
			return fmt.Errorf("ingest: worker %q rank %d: bind %s: %w%s", w.ID, dp, r.ep, err, r.ep.bindHint())
		}
		if r.ep.Bind {
			r.log.Info("kv events: bound; waiting for the engine to connect", "endpoint", r.ep.String(), "listening", r.ln.Addr().String())
		}
		ranks = append(ranks, r)
	}
	if resume && m.cfg.Index != nil {
		ranks[0].sink.adopt(m.namedRanks(w))
	}
	for _, r := range ranks {
		r.run()
	}
	m.workers[w.ID] = &worker{w: w, ranks: ranks, gate: gate}
	m.added[w.ID] = true
	return nil
}

// newRank makes rank dp of w, from its snapshot position if resume; its
// index writes pass gate.
func (m *Manager) newRank(w Worker, dp int, resume bool, gate *writeGate) (*rank, error) {
	s, err := w.kvEndpoint(dp)
	if err != nil {
		return nil, err
	}
	ep, err := ParseEndpoint(s)
	if err != nil {
		return nil, err
	}
	dialer := newDialer(m.cfg.DialTimeout, m.cfg.KeepAlive)
	r := &rank{
		worker:     w.ID,
		dp:         uint32(dp),
		ep:         ep,
		topic:      []byte(w.Topic),
		log:        m.log.With("worker", w.ID, "dp_rank", dp),
		dialer:     dialer,
		backoffMin: m.cfg.ReconnectMin,
		backoffMax: m.cfg.ReconnectMax,
		q:          make(chan item, m.cfg.QueueDepth),
		large:      make(chan struct{}, largeSlots),
		pauses:     make(chan *pause),
		lim: zmtpLimits{handshake: m.cfg.HandshakeTimeout, frame: m.cfg.FrameTimeout,
			maxMessage: m.cfg.MaxMessageBytes},
		budget:          m.budget,
		handshakes:      make(chan struct{}, m.cfg.MaxHandshakes),
		catchUpInterval: m.cfg.CatchUpInterval,
		capFixed:        w.CapacityTokens / uint64(m.cfg.BlockSize),
	}
	r.capBlocks.Store(r.capFixed)
	if s, err := w.replayEndpoint(dp); err != nil {
		return nil, err
	} else if s != "" {
		rep, err := replayEndpoint(s)
		if err != nil {
			return nil, err
		}
		r.replay = &replayClient{ep: rep, dialer: dialer, timeout: m.cfg.ReplayTimeout,
			lim: zmtpLimits{handshake: m.cfg.HandshakeTimeout, maxMessage: m.cfg.MaxMessageBytes}}
		r.seq.canReplay = true
	}
	id := kv.WorkerRank{ID: w.ID, DPRank: uint32(dp)}
	if m.cfg.newSink != nil {
		r.sink = m.cfg.newSink(id)
	} else {
		r.sink = newIndexSink(m.cfg.Index, id, m.cfg.BlockSize, m.cfg.MaxBatchEvents, r.log)
	}
	r.sink = &gatedSink{sink: r.sink, gate: gate}
	if m.metrics != nil {
		r.met = m.metrics.rank(w.ID, uint32(dp))
	}
	if resume {
		if p, ok := m.cfg.Resume(id); ok && p.HasSeq {
			r.resume = &p
		}
	}
	return r, nil
}

// namedRanks returns the dp ranks at or above w's DPSize that hold blocks
// of w in the index: a restored worker's batches named them (the batch's
// rank is trusted), and no rank of its own clears them. The snapshot does
// not say which rank named them; rank 0, the one that names other ranks
// when the engine's ranks share a publisher, takes them.
func (m *Manager) namedRanks(w Worker) []uint32 {
	var out []uint32
	for dp := uint32(w.DPSize); dp < kv.MaxDPSize; dp++ {
		if m.cfg.Index.Cached(kv.WorkerRank{ID: w.ID, DPRank: dp}) > 0 {
			out = append(out, dp)
		}
	}
	return out
}

// Remove stops following a worker and removes its blocks from the index.
//
// It holds the Manager's lock only to take the worker out: Add, Status,
// Checkpoint and other Removes go on while it waits (at most StopTimeout)
// for the worker's goroutines. It then closes the worker's write gate: the
// index forgets the worker once no write of its ranks is in progress, and
// no later write of theirs reaches the index, even from goroutines that
// did not stop in time (Remove then fails, but the worker is removed all
// the same). Until the index has forgotten it, Add refuses the worker ID.
func (m *Manager) Remove(workerID string) error {
	m.mu.Lock()
	wk, ok := m.workers[workerID]
	if !ok {
		m.mu.Unlock()
		return fmt.Errorf("ingest: worker %q is not registered", workerID)
	}
	delete(m.workers, workerID)
	m.retiring[workerID] = true
	m.mu.Unlock()

	err := m.stopRanks(wk.ranks)
	wk.gate.close(func() { m.retire(workerID) })
	if err != nil {
		return fmt.Errorf("ingest: remove worker %q: %w", workerID, err)
	}
	return nil
}

// retire removes a removed worker from the index and the metrics, once no
// write of its ranks is in progress or can start; Add may then take its ID
// again. It runs on Remove's goroutine, or on the applier that finishes the
// worker's last write: never with the Manager's lock held.
func (m *Manager) retire(workerID string) {
	if m.cfg.Index != nil {
		m.cfg.Index.RemoveWorker(workerID)
	}
	if m.metrics != nil {
		m.metrics.forget(workerID)
	}
	m.mu.Lock()
	delete(m.retiring, workerID)
	m.mu.Unlock()
}

// stopRanks stops ranks in parallel, waiting at most StopTimeout.
func (m *Manager) stopRanks(ranks []*rank) error {
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.stop()
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(m.cfg.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("subscriptions did not stop within %v", m.cfg.StopTimeout)
	}
}

// Status reports every rank of a worker, by rank; nil if it is unknown.
func (m *Manager) Status(workerID string) []RankStatus {
	m.mu.Lock()
	wk, ok := m.workers[workerID]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	out := make([]RankStatus, 0, len(wk.ranks))
	for _, r := range wk.ranks {
		out = append(out, r.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DPRank < out[j].DPRank })
	return out
}

// NotCaughtUp returns the ranks, of every worker, whose first connection's
// catch-up is not over (RankStatus.CaughtUp): a router that has just
// restored an index waits for these before it reports ready.
func (m *Manager) NotCaughtUp() []kv.WorkerRank {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []kv.WorkerRank
	for _, wk := range m.workers {
		for _, r := range wk.ranks {
			if !r.caughtUp.Load() {
				out = append(out, kv.WorkerRank{ID: r.worker, DPRank: r.dp})
			}
		}
	}
	return out
}

// errRankStopped: the rank stopped before Checkpoint reached it.
var errRankStopped = errors.New("rank stopped")

// Checkpoint calls fn for every rank, one at a time, by worker ID then rank,
// with that rank's applier paused between two batches (never inside one;
// during a replay, between two replies); other ranks go on applying. While
// fn runs, the index ranks the rank writes to (indexRanks: its own, then
// those its batches named) hold exactly its batches up to pos: fn exports
// them.
//
// A rank removed before its turn is left out; one removed while fn runs
// stops at once (fn may still read its index ranks while Remove clears
// them), and fn may call Remove, Status or Add. Ranks added meanwhile may
// be left out. Checkpoint fails if the Manager is closed before or during
// it, or with fn's first error (the ranks after it are not visited).
func (m *Manager) Checkpoint(fn func(rank kv.WorkerRank, pos Position, indexRanks []kv.WorkerRank) error) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errors.New("ingest: checkpoint: manager is closed")
	}
	var ranks []*rank
	for _, wk := range m.workers {
		ranks = append(ranks, wk.ranks...)
	}
	m.mu.Unlock()
	sort.Slice(ranks, func(i, j int) bool {
		a, b := ranks[i], ranks[j]
		return a.worker < b.worker || a.worker == b.worker && a.dp < b.dp
	})
	for _, r := range ranks {
		err := r.checkpoint(fn)
		switch {
		case errors.Is(err, errRankStopped) && m.ctx.Err() != nil:
			return errors.New("ingest: checkpoint: manager closed during the checkpoint")
		case errors.Is(err, errRankStopped):
			// Removed: not part of the cut.
		case err != nil:
			return fmt.Errorf("ingest: checkpoint worker %q rank %d: %w", r.worker, r.dp, err)
		}
	}
	return nil
}

// Close stops every subscription, waiting at most StopTimeout. The index is
// left as it is: after Close returns, no subscription writes to it again
// (one that did not stop in time may finish the write it is in).
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	var ranks []*rank
	var gates []*writeGate
	for _, wk := range m.workers {
		ranks = append(ranks, wk.ranks...)
		gates = append(gates, wk.gate)
	}
	m.workers = map[string]*worker{}
	m.mu.Unlock()
	m.cancel()
	err := m.stopRanks(ranks)
	for _, g := range gates {
		g.close(nil) // late goroutines write nothing more
	}
	if err != nil {
		return fmt.Errorf("ingest: close: %w", err)
	}
	return nil
}
