package ingest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// item is one entry of a rank's queue: a batch, or the news that a new
// connection is up.
type item struct {
	connected bool
	seq       uint64
	topic     []byte
	payload   []byte
	budget    int64 // bytes taken from the shared queue budget
}

// rank follows one worker/rank: readers (one per live connection) check frames
// and feed a bounded queue; one applier goroutine tracks sequence numbers,
// replays gaps and applies batches in order.
type rank struct {
	worker string
	dp     uint32
	ep     Endpoint
	replay replayer // nil: the engine has no replay endpoint
	topic  []byte
	sink   sink
	log    *slog.Logger
	met    *rankMetrics // nil: no metrics
	dialer *net.Dialer
	lim    zmtpLimits
	budget *budget // shared by every rank of the Manager

	backoffMin, backoffMax time.Duration
	// catchUpInterval: at most one full catch-up per interval (<= 0: no
	// limit); lastFull is when the last one was allowed (applier's).
	catchUpInterval time.Duration
	lastFull        time.Time

	q      chan item
	large  chan struct{} // slots for queued messages of largeMessage bytes or more
	pauses chan *pause   // Checkpoint's requests, served by the applier between batches
	resume *Position     // the snapshot position the applier starts from (nil: none)
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ln     net.Listener // bind mode
	// handshakes holds a slot per handshake in progress (bind mode); live
	// is set while a publisher's connection is served: one at a time.
	handshakes chan struct{}
	live       atomic.Bool

	// Status, read by Status from any goroutine.
	conns          atomic.Int32
	everConnected  atomic.Bool
	lastSeq        atomic.Uint64
	eventsApplied  atomic.Uint64
	gaps           atomic.Uint64
	replays        atomic.Uint64
	replayFailures atomic.Uint64
	restarts       atomic.Uint64
	reconnects     atomic.Uint64
	decodeErrors   atomic.Uint64
	malformed      atomic.Uint64
	dropped        atomic.Uint64
	limited        atomic.Uint64
	budgetWaits    atomic.Uint64
	restore        atomic.Uint32 // the restore's outcome + 1 (0: none decided)
	inexact        atomic.Bool   // history was lost and the blocks kept (rankcap.go)
	inexactSince   atomic.Uint64 // the first seq lost
	capBlocks      atomic.Uint64 // the capacity in router blocks (0: not known yet)
	evictions      atomic.Uint64 // claims an inexact rank dropped for its capacity
	// capFixed is the registration's capacity in router blocks (0: learn it).
	capFixed uint64
	caughtUp atomic.Bool // the first connection's catch-up is over (CaughtUp)

	// Applier state, owned by the applier goroutine.
	seq       seqState
	acts      []seqAction // the current step's actions
	replyActs []seqAction // a replay reply's, while a step's replay runs
	badActs   []seqAction // an undecodable batch's
	replayErr error       // the last replay's error, for its log line
	st        batchStats
	logLimit  rateLimit
	probs     problems
}

// listen binds (bind mode); run then starts the rank's goroutines. A worker's
// ranks all bind before any runs, so an Add that fails has applied nothing.
func (r *rank) listen(parent context.Context) error {
	r.ctx, r.cancel = context.WithCancel(parent)
	if !r.ep.Bind {
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(r.ctx, r.ep.network(), r.ep.Address)
	if err != nil {
		r.cancel()
		return err
	}
	r.ln = ln
	return nil
}

func (r *rank) run() {
	r.wg.Add(2)
	if r.ln != nil {
		go r.acceptLoop()
	} else {
		go r.connectLoop()
	}
	go r.applyLoop()
}

// stop ends the rank's goroutines and waits for them, then gives back the
// queue budget of what it had queued.
func (r *rank) stop() {
	r.cancel()
	if r.ln != nil {
		r.ln.Close()
	}
	r.wg.Wait()
	for {
		select {
		case it := <-r.q:
			r.dequeued(it)
		default:
			return
		}
	}
}

// connectLoop dials the engine, reads until the connection fails, and
// dials again with exponential backoff and jitter.
func (r *rank) connectLoop() {
	defer r.wg.Done()
	backoff := r.backoffMin
	for r.ctx.Err() == nil {
		nc, err := r.dialer.DialContext(r.ctx, r.ep.network(), r.ep.Address)
		if err == nil {
			var c *zmtpConn
			c, err = r.open(nc, false)
			if err == nil {
				backoff = r.backoffMin
				r.live.Store(true)
				r.serve(c)
				r.live.Store(false)
				continue
			}
			nc.Close()
			r.drop(dropHandshake, err)
		}
		if r.ctx.Err() != nil {
			return
		}
		r.log.Debug("kv events: connect failed", "endpoint", r.ep.String(), "err", err, "retry_in", backoff)
		wait := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, r.backoffMax)
	}
}

// acceptLoop accepts engine connections in bind mode.
func (r *rank) acceptLoop() {
	defer r.wg.Done()
	for {
		nc, err := r.ln.Accept()
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			r.log.Warn("kv events: accept failed", "endpoint", r.ep.String(), "err", err)
			t := time.NewTimer(r.backoffMin)
			select {
			case <-r.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		// One publisher at a time, and a few handshakes in progress: a
		// peer that connects again and again, or a crowd of silent ones,
		// costs a refused connection each.
		if r.live.Load() {
			nc.Close()
			r.drop(dropPublisher, nil)
			continue
		}
		select {
		case r.handshakes <- struct{}{}:
		default:
			nc.Close()
			r.drop(dropHandshakes, nil)
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			c, err := r.open(nc, true)
			<-r.handshakes
			if err != nil {
				nc.Close()
				r.drop(dropHandshake, err)
				return
			}
			if !r.live.CompareAndSwap(false, true) {
				nc.Close()
				r.drop(dropPublisher, nil)
				return
			}
			defer r.live.Store(false)
			r.serve(c)
		}()
	}
}

// Reasons a connection is refused or dropped (connections_dropped_total).
const (
	dropPublisher  = iota // a bound rank already has a live publisher
	dropHandshakes        // too many handshakes in progress on a bound rank
	dropHandshake         // the handshake failed or timed out
	dropStalled           // a message stopped arriving part-way (FrameTimeout)
	numDropReasons
)

var dropReasons = [numDropReasons]string{"second_publisher", "handshakes", "handshake", "stalled"}

// drop counts a connection refused or dropped for reason.
func (r *rank) drop(reason int, err error) {
	if r.ctx.Err() != nil {
		return // stopping: the rank closed it
	}
	r.dropped.Add(1)
	if r.met != nil {
		r.met.dropped[reason].Inc()
	}
	if r.logLimit.allow() {
		r.log.Warn("kv events: connection dropped", "endpoint", r.ep.String(), "reason", dropReasons[reason], "err", err)
	}
}

// open performs the SUB handshake and subscribes.
func (r *rank) open(nc net.Conn, server bool) (*zmtpConn, error) {
	stop := context.AfterFunc(r.ctx, func() { nc.Close() })
	defer stop()
	c, err := handshakeZMTP(nc, zmq4.Sub, server, r.lim)
	if err != nil {
		return nil, err
	}
	if err := c.subscribe(r.topic); err != nil {
		return nil, err
	}
	return c, nil
}

// serve reads one connection until it fails or the rank stops.
func (r *rank) serve(c *zmtpConn) {
	nc := c.nc
	stop := context.AfterFunc(r.ctx, func() { nc.Close() })
	defer stop()
	defer nc.Close()

	if r.everConnected.Swap(true) {
		r.reconnects.Add(1)
		if r.met != nil {
			r.met.reconnects.Inc()
		}
	}
	r.conns.Add(1)
	if r.met != nil {
		r.met.connected.Set(float64(r.conns.Load()))
	}
	r.log.Info("kv events: connected", "endpoint", r.ep.String())
	defer func() {
		n := r.conns.Add(-1)
		if r.met != nil {
			r.met.connected.Set(float64(n))
		}
		if r.ctx.Err() == nil {
			r.log.Warn("kv events: disconnected", "endpoint", r.ep.String())
		}
	}()

	if !r.push(item{connected: true}) {
		return
	}
	for {
		f, n, cmd, err := c.recv()
		switch {
		case errors.Is(err, errMessageTooLarge):
			r.malformedMsg("size", "%v; dropping the connection", err)
			return
		case errors.Is(err, errStalled):
			r.drop(dropStalled, err)
			return
		case err != nil:
			return
		case cmd:
			continue // PING is answered by recv; other commands carry nothing for us
		}
		if n != 3 {
			r.malformedMsg("frames", "message with %d frames, want 3", n)
			continue
		}
		if len(f[1]) != 8 {
			r.malformedMsg("seq", "seq frame of %d bytes, want 8", len(f[1]))
			continue
		}
		if !bytes.HasPrefix(f[0], r.topic) {
			r.malformedMsg("topic", "topic %q does not match prefix %q", f[0], r.topic)
			continue
		}
		if r.met != nil {
			r.met.bytes.Add(float64(len(f[2])))
		}
		it := item{seq: binary.BigEndian.Uint64(f[1]), topic: f[0], payload: f[2]}
		if !r.takeBudget(&it) || !r.push(it) {
			r.budget.give(it.budget)
			return
		}
	}
}

// takeBudget takes the item's bytes from the shared queue budget, waiting
// (reading nothing) while other ranks' queued batches hold it.
func (r *rank) takeBudget(it *item) bool {
	took, _ := r.budget.take(r.ctx, int64(len(it.payload)+len(it.topic)), r)
	it.budget = took
	return took > 0
}

// budgetWait counts a reader about to wait for the queue budget.
func (r *rank) budgetWait() {
	r.budgetWaits.Add(1)
	if r.met != nil {
		r.met.budgetWaits.Inc()
	}
}

// Large messages: the queue bounds messages by count, so at most largeSlots
// of the queued ones may be largeMessage bytes or more. Memory held by a
// rank's queue is then below QueueDepth x largeMessage + largeSlots x
// maxMessageBytes, whatever the publisher sends.
const (
	largeMessage = 1 << 20
	largeSlots   = 4
)

// push queues it, blocking while the queue is full, or while it is large and
// the large message slots are taken (back-pressure on the reader, then on
// TCP, then on the engine's high-water mark).
func (r *rank) push(it item) bool {
	if len(it.payload) >= largeMessage {
		select {
		case r.large <- struct{}{}:
		case <-r.ctx.Done():
			return false
		}
	}
	select {
	case r.q <- it:
		return true
	case <-r.ctx.Done():
		return false
	}
}

func (r *rank) malformedMsg(reason, format string, args ...any) {
	r.malformed.Add(1)
	r.decodeErrors.Add(1)
	if r.met != nil {
		r.met.malformed(reason).Inc()
	}
	if r.logLimit.allow() {
		r.log.Warn("kv events: malformed message skipped", "endpoint", r.ep.String(), "reason", reason,
			"detail", fmt.Sprintf(format, args...))
	}
}

// applyLoop applies the queue in order, after the restore if there is one,
// and pauses between two batches when Checkpoint asks.
func (r *rank) applyLoop() {
	defer r.wg.Done()
	if r.resume != nil {
		r.restoreFrom(*r.resume)
	}
	for {
		select {
		case <-r.ctx.Done():
			return
		case p := <-r.pauses:
			r.hold(p)
		case it := <-r.q:
			if it.connected {
				r.dequeued(it)
				r.onConnect()
				continue
			}
			r.onBatch(it.seq, it.topic, it.payload)
			r.dequeued(it)
		}
	}
}

// dequeued releases the large message slot of a handled item, if it held
// one, and gives its bytes back to the queue budget: the payload is
// referenced only until it is applied.
func (r *rank) dequeued(it item) {
	if len(it.payload) >= largeMessage {
		<-r.large
	}
	r.budget.give(it.budget)
}

// restoreFrom steps the snapshot's position in: the index holds the rank's
// blocks as of p.Seq.
func (r *rank) restoreFrom(p Position) {
	r.lastSeq.Store(p.Seq)
	if r.met != nil {
		r.met.lastSeq.Set(float64(p.Seq))
	}
	r.handle(seqInput{kind: inRestore, seq: p.Seq, sum: p.Sum, epoch: []byte(p.Epoch)}, nil)
	r.bound() // the snapshot's blocks were exact as of p.Seq
}

// pause is Checkpoint's hold on a rank's applier, between two batches.
type pause struct {
	pos    Position
	ranks  []kv.WorkerRank
	held   chan struct{} // closed by the applier once pos and ranks are set
	resume chan struct{} // closed by Checkpoint when it is done with the rank
}

// hold serves p: it reports the rank's position and the index ranks it
// writes to, then applies nothing until Checkpoint resumes it or the rank
// stops (a rank removed meanwhile does not wait for Checkpoint).
func (r *rank) hold(p *pause) {
	p.pos = r.position()
	p.ranks = append(p.ranks, kv.WorkerRank{ID: r.worker, DPRank: r.dp})
	for _, dp := range r.sink.otherRanks() {
		p.ranks = append(p.ranks, kv.WorkerRank{ID: r.worker, DPRank: dp})
	}
	close(p.held)
	select {
	case <-p.resume:
	case <-r.ctx.Done():
	}
}

// between serves a waiting Checkpoint, if any, between two replay replies:
// a long replay does not hold a checkpoint up, and what it applied so far
// is a cut like any other.
func (r *rank) between() {
	select {
	case p := <-r.pauses:
		r.hold(p)
	default:
	}
}

// position is what the rank has applied: the index holds its blocks as of
// this.
func (r *rank) position() Position {
	s := &r.seq
	p := Position{HasSeq: s.held.ok, Epoch: string(s.epoch)}
	if s.held.ok {
		p.Seq, p.Sum = s.held.last, s.held.sum
	}
	return p
}

// checkpoint pauses the applier between two batches and calls fn with its
// position. It returns errRankStopped, without calling fn, when the rank
// stops first.
func (r *rank) checkpoint(fn func(kv.WorkerRank, Position, []kv.WorkerRank) error) error {
	p := &pause{held: make(chan struct{}), resume: make(chan struct{})}
	select {
	case r.pauses <- p:
	case <-r.ctx.Done():
		return errRankStopped
	}
	defer close(p.resume)
	select {
	case <-p.held:
	case <-r.ctx.Done():
		// Stopping: p, if taken, is resumed by the deferred close.
		return errRankStopped
	}
	return fn(kv.WorkerRank{ID: r.worker, DPRank: r.dp}, p.pos, p.ranks)
}

// onConnect tells the sequence state machine that a new connection is up,
// and whether a full catch-up was allowed less than catchUpInterval ago.
func (r *rank) onConnect() {
	now := time.Now()
	limited := r.catchUpInterval > 0 && !r.lastFull.IsZero() && now.Sub(r.lastFull) < r.catchUpInterval
	if !limited {
		r.lastFull = now
	}
	r.handle(seqInput{kind: inConnect, limited: limited}, nil)
	// handle ran the catch-up the connection asked for (if any) to its
	// end: replied, failed or cut.
	r.caughtUp.Store(true)
}

// onBatch hands it one batch from the live stream.
func (r *rank) onBatch(seq uint64, topic, payload []byte) {
	in := seqInput{kind: inLive, seq: seq, sum: xxhash.Sum64(payload), epoch: topicEpoch(topic)}
	r.handle(in, payload)
}

// handle steps one input into the sequence state machine and carries out its
// actions. A replay it asks for runs here: its replies are stepped in as they
// arrive, then its end (or failure), until the state machine asks for no
// more. payload is the live batch's, for the actions that apply it.
func (r *rank) handle(in seqInput, payload []byte) {
	acts := r.seq.step(in, r.acts[:0])
	for {
		from, replay, _ := r.execute(acts, payload, false)
		r.acts = acts[:0]
		if !replay {
			return
		}
		acts = r.seq.step(r.runReplay(from), r.acts[:0])
	}
}

// runReplay asks the engine for its buffer from seq from on and returns how
// the replay ended. A rank stopped under it abandoned it: it did not fail.
func (r *rank) runReplay(from uint64) seqInput {
	r.replays.Add(1)
	if r.met != nil {
		r.met.replays.Inc()
	}
	err := r.replay.replay(r.ctx, from, r.onReply)
	switch {
	case r.ctx.Err() != nil:
		return seqInput{kind: inReplayAbandoned}
	case err != nil:
		r.replayErr = err
		return seqInput{kind: inReplayFailed}
	}
	return seqInput{kind: inReplayEnd}
}

// onReply steps one replayed batch in (topic: the reply's, nil if it has
// none); an error cuts the replay off.
func (r *rank) onReply(seq uint64, topic, payload []byte) error {
	in := seqInput{kind: inReplayReply, seq: seq, sum: xxhash.Sum64(payload), epoch: topicEpoch(topic)}
	acts := r.seq.step(in, r.replyActs[:0])
	_, _, cut := r.execute(acts, payload, false)
	r.replyActs = acts[:0]
	if cut == nil {
		r.between()
	}
	return cut
}

// execute carries out one step's actions; payload is the batch the step was
// about. It returns the replay asked for, if any, and the error that cuts
// off a replay whose seqs do not increase. An apply whose batch does not
// decode (the step's last action) steps undecodable in and carries out its
// actions too (redo: those; nothing they apply is the same batch again).
func (r *rank) execute(acts []seqAction, payload []byte, redo bool) (from uint64, replay bool, cut error) {
	for i := range acts {
		switch a := &acts[i]; a.kind {
		case actApply:
			if !r.apply(a.seq, payload) && !redo && i == len(acts)-1 {
				more := r.seq.step(seqInput{kind: inUndecodable, seq: a.seq}, r.badActs[:0])
				f, rp, c := r.execute(more, nil, true)
				r.badActs = more[:0]
				if rp {
					from, replay = f, true
				}
				if c != nil {
					cut = c
				}
			}
		case actClear:
			r.sink.reset()
			r.markExact()
		case actInexact:
			r.markInexact(a.seq)
		case actReplay:
			from, replay = a.seq, true
		case actCutReplay:
			cut = fmt.Errorf("%w: %d after %d", errReplayOrder, a.seq, a.arg)
		case actCount:
			r.count(a.counter)
		case actLog:
			r.logNote(a)
		case actOutcome:
			r.outcome(a)
		}
	}
	return from, replay, cut
}

// count adds one to a status counter and its metric.
func (r *rank) count(c seqCounter) {
	switch c {
	case countGaps:
		r.gaps.Add(1)
		if r.met != nil {
			r.met.gaps.Inc()
		}
	case countReplayFailures:
		r.replayFailures.Add(1)
		if r.met != nil {
			r.met.replayFailures.Inc()
		}
	case countRestarts:
		r.restarts.Add(1)
		if r.met != nil {
			r.met.restarts.Inc()
		}
		r.lastSeq.Store(0) // nothing of the new incarnation applied yet
	case countCatchUpsLimited:
		r.limited.Add(1)
		if r.met != nil {
			r.met.catchUpsLimited.Inc()
		}
	}
}

// logNote writes the log line an action asks for.
func (r *rank) logNote(a *seqAction) {
	n := &seqNotes[a.note]
	var args []any
	switch {
	case a.note == noteReplayFailed:
		args = []any{"err", r.replayErr}
	case a.reason != "":
		args = []any{"reason", a.reason, n.seqKey, a.seq, n.argKey, a.arg}
	default:
		args = []any{n.seqKey, a.seq, n.argKey, a.arg}
	}
	if n.warn {
		r.log.Warn(n.msg, args...)
	} else {
		r.log.Info(n.msg, args...)
	}
}

// outcome records a restore's outcome: the status, its counter and its one
// log line.
func (r *rank) outcome(a *seqAction) {
	o := &restoreOutcomes[a.outcome]
	r.restore.Store(uint32(a.outcome) + 1)
	if r.met != nil {
		r.met.restores[a.outcome].Inc()
	}
	if a.outcome == outcomeReset {
		r.lastSeq.Store(0) // nothing of the new incarnation applied yet
	}
	args := []any{"last_seq", a.seq}
	if a.hasArg {
		args = append(args, o.argKey, a.arg)
	}
	args = append(args, "reason", a.reason)
	level := slog.LevelInfo
	if o.warn {
		level = slog.LevelWarn
	}
	r.log.Log(context.Background(), level, o.msg, args...)
}

// apply decodes and applies one batch. It reports false when the batch does
// not decode: nothing of it was applied, and it must not count as applied.
// A batch refused for what it says (a dp rank no engine has) is applied as
// nothing: its seq is consumed.
func (r *rank) apply(seq uint64, payload []byte) bool {
	r.st.reset()
	err := r.sink.apply(payload, &r.st)
	if errors.Is(err, errGateClosed) {
		return true // removed: the rank is stopping, nothing is recorded
	}
	if err != nil {
		r.decodeErrors.Add(1)
		if r.met != nil {
			r.met.decodeErrors.Inc()
		}
		if !errors.Is(err, errRefused) {
			r.problem(seq, "decode_error", 1, err.Error())
			return false
		}
		r.problem(seq, "batch_refused", 1, err.Error())
	}
	r.lastSeq.Store(seq)
	if r.st.cleared {
		r.markExact()
	}
	r.noteProblems(seq, &r.st)
	r.bound()
	r.eventsApplied.Add(uint64(r.st.events))
	if r.met != nil {
		r.met.record(seq, &r.st)
	}
	if r.st.decodeErrors > 0 {
		r.decodeErrors.Add(uint64(r.st.decodeErrors))
		if r.logLimit.allow() {
			r.log.Warn("kv events: events skipped", "seq", seq,
				"count", r.st.decodeErrors, "err", r.st.firstErr)
		}
	}
	return true
}

// status reports the rank's counters.
func (r *rank) status() RankStatus {
	return RankStatus{
		DPRank:          r.dp,
		Connected:       r.conns.Load() > 0,
		LastSeq:         r.lastSeq.Load(),
		EventsApplied:   r.eventsApplied.Load(),
		Gaps:            r.gaps.Load(),
		Replays:         r.replays.Load(),
		ReplayFailures:  r.replayFailures.Load(),
		EngineRestarts:  r.restarts.Load(),
		Reconnects:      r.reconnects.Load(),
		DecodeErrors:    r.decodeErrors.Load(),
		Dropped:         r.dropped.Load(),
		CatchUpsLimited: r.limited.Load(),
		BudgetWaits:     r.budgetWaits.Load(),
		CachedBlocks:    r.sink.cached(),
		Restore:         restoreName(r.restore.Load()),
		CaughtUp:        r.caughtUp.Load(),
		Inexact:         r.inexact.Load(),
		InexactSinceSeq: r.inexactSince.Load(),
		CapacityBlocks:  r.capBlocks.Load(),
		Evictions:       r.evictions.Load(),
		Problems:        r.probs.snapshot(),
	}
}

// restoreName names a stored restore outcome ("" when none was decided).
func restoreName(v uint32) string {
	if v == 0 {
		return ""
	}
	return restoreOutcomes[v-1].name
}

// rateLimit allows one log line per interval.
type rateLimit struct {
	next atomic.Int64
}

func (l *rateLimit) allow() bool {
	now := time.Now().UnixNano()
	n := l.next.Load()
	return now >= n && l.next.CompareAndSwap(n, now+int64(10*time.Second))
}
