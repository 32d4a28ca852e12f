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
)

// sink applies one rank's batches in order. One goroutine uses it at a time.
type sink interface {
	// apply decodes one batch and applies it to the index, accumulating
	// counts into st. An error means the batch could not be decoded at all.
	apply(payload []byte, st *batchStats) error
	// reset drops everything the rank holds in the index and forgets the
	// decoder's learned state.
	reset()
	// cached reports the number of blocks the rank holds in the index.
	cached() uint64
}

// replayer asks the engine for its buffered batches from start on, calling
// fn for each, up to the end marker. An error from fn ends the replay and is
// returned (wrapped).
type replayer interface {
	replay(ctx context.Context, start uint64, fn func(seq uint64, payload []byte) error) error
}

// errReplayOrder marks a replay whose seqs do not strictly increase: a peer
// repeating or reordering batches (possibly forever) is cut off.
var errReplayOrder = errors.New("replay seqs out of order")

// item is one entry of a rank's queue: a batch, or the news that a new
// connection is up.
type item struct {
	connected bool
	seq       uint64
	topic     []byte
	payload   []byte
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

	backoffMin, backoffMax time.Duration

	q      chan item
	large  chan struct{} // slots for queued messages of largeMessage bytes or more
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ln     net.Listener // bind mode

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

	// Applier state, owned by the applier goroutine.
	hasLast   bool
	last      uint64
	lastSum   uint64 // XXH64 of the payload applied at last
	covered   bool   // a replay on this connection applied up to coveredTo
	coveredTo uint64 //
	liveSeen  bool   // a live batch arrived on this connection
	liveLast  uint64 //
	// fromZero: a replay found the engine's buffer empty, so the engine's
	// next batch is seq 0 and a later first seq is a gap.
	fromZero bool
	epoch    []byte // last sgl-kv-epoch seen in the topic
	st       batchStats
	logLimit rateLimit
}

// start binds (bind mode) and starts the rank's goroutines.
func (r *rank) start(parent context.Context) error {
	r.ctx, r.cancel = context.WithCancel(parent)
	if r.ep.Bind {
		var lc net.ListenConfig
		ln, err := lc.Listen(r.ctx, r.ep.network(), r.ep.Address)
		if err != nil {
			r.cancel()
			return err
		}
		r.ln = ln
		r.wg.Add(1)
		go r.acceptLoop()
	} else {
		r.wg.Add(1)
		go r.connectLoop()
	}
	r.wg.Add(1)
	go r.applyLoop()
	return nil
}

// stop ends the rank's goroutines and waits for them.
func (r *rank) stop() {
	r.cancel()
	if r.ln != nil {
		r.ln.Close()
	}
	r.wg.Wait()
}

// connectLoop dials the engine, reads until the connection fails, and
// dials again with exponential backoff and jitter.
func (r *rank) connectLoop() {
	defer r.wg.Done()
	backoff := r.backoffMin
	for r.ctx.Err() == nil {
		nc, err := r.dialer.DialContext(r.ctx, r.ep.network(), r.ep.Address)
		if err == nil {
			var c *zmq4.Conn
			c, err = r.open(nc, false)
			if err == nil {
				backoff = r.backoffMin
				r.serve(nc, c)
				continue
			}
			nc.Close()
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
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			c, err := r.open(nc, true)
			if err != nil {
				nc.Close()
				r.log.Debug("kv events: handshake failed", "endpoint", r.ep.String(), "err", err)
				return
			}
			r.serve(nc, c)
		}()
	}
}

// open performs the SUB handshake and subscribes.
func (r *rank) open(nc net.Conn, server bool) (*zmq4.Conn, error) {
	stop := context.AfterFunc(r.ctx, func() { nc.Close() })
	defer stop()
	c, err := openZMTP(nc, zmq4.Sub, server)
	if err != nil {
		return nil, err
	}
	if err := subscribe(c, r.topic); err != nil {
		return nil, err
	}
	return c, nil
}

// serve reads one connection until it fails or the rank stops.
func (r *rank) serve(nc net.Conn, c *zmq4.Conn) {
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
		msg, err := c.RecvMsg()
		if err != nil {
			if errors.Is(err, errMessageTooLarge) {
				r.malformedMsg("size", "%v; dropping the connection", err)
			}
			return
		}
		if msg.Type == zmq4.CmdMsg {
			continue // PING is answered by zmq4; other commands carry nothing for us
		}
		f := msg.Frames
		if len(f) != 3 {
			r.malformedMsg("frames", "message with %d frames, want 3", len(f))
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
		if !r.push(item{seq: binary.BigEndian.Uint64(f[1]), topic: f[0], payload: f[2]}) {
			return
		}
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

// applyLoop applies the queue in order.
func (r *rank) applyLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.ctx.Done():
			return
		case it := <-r.q:
			r.dequeued(it)
			if it.connected {
				r.onConnect()
				continue
			}
			r.checkEpoch(it.topic, it.seq)
			r.live(it.seq, it.payload)
		}
	}
}

// dequeued releases the large message slot of a dequeued item, if it held
// one. The applier is then done with the queue's share of its memory: the
// payload is referenced only until it is applied.
func (r *rank) dequeued(it item) {
	if len(it.payload) >= largeMessage {
		<-r.large
	}
}

// onConnect starts a new connection's sequence bookkeeping and, when the
// engine has a replay endpoint, catches up from seq 0 so the rank sees the
// engine's current cache. A buffer that ends below the last seq applied means
// the engine restarted while the connection was down.
func (r *rank) onConnect() {
	r.covered, r.liveSeen = false, false
	if r.replay == nil {
		return
	}
	hadLast, last := r.hasLast, r.last
	maxSeen, seen, other, err := r.replayFrom(0)
	switch {
	case other:
		// The buffer's batch at the last applied seq is not the one applied:
		// a new incarnation has already published past it.
		r.restart("replay buffer holds another batch at the last applied seq", last, maxSeen)
		maxSeen, seen, _, err = r.replayFrom(0)
	case err == nil && hadLast && (!seen || maxSeen < last):
		r.restart("replay buffer ends before the last applied seq", last, maxSeen)
		maxSeen, seen, _, err = r.replayFrom(0)
	}
	r.markCovered(maxSeen, seen, err)
	if err != nil {
		r.replayFailed(err)
		return
	}
	r.fromZero = !r.hasLast
}

// live handles one batch from the live stream.
func (r *rank) live(seq uint64, payload []byte) {
	if r.hasLast && seq <= r.last {
		if r.covered && seq <= r.coveredTo && (!r.liveSeen || seq > r.liveLast) {
			// A replay on this connection already applied it.
			r.liveSeen, r.liveLast = true, seq
			return
		}
		r.restartAndCatchUp("seq went backwards", seq)
	}
	r.liveSeen, r.liveLast = true, seq
	switch {
	case r.hasLast && seq > r.last+1:
		r.fillGap(r.last+1, seq)
	case !r.hasLast && r.fromZero && seq > 0:
		r.fillGap(0, seq)
	}
	if r.ctx.Err() != nil {
		return // stopped during the replay: leave the index as it is
	}
	if r.hasLast && seq <= r.last {
		return // the replay applied it
	}
	if r.hasLast && seq != r.last+1 {
		// The replay ended short of seq: the hole stays.
		r.lost("replay did not reach the live seq", r.last+1, seq)
	}
	r.apply(seq, payload)
}

// restartAndCatchUp clears the rank for a new engine incarnation and, when
// the engine has a replay endpoint, applies its buffer from seq 0.
func (r *rank) restartAndCatchUp(why string, got uint64) {
	r.restart(why, r.last, got)
	if r.replay == nil {
		return
	}
	maxSeen, seen, _, err := r.replayFrom(0)
	r.markCovered(maxSeen, seen, err)
	if err != nil {
		r.replayFailed(err)
		return
	}
	r.fromZero = !r.hasLast
}

// epochKey marks SGLang's per-incarnation topic suffix.
var epochKey = []byte("sgl-kv-epoch=")

// checkEpoch treats a change of the topic's sgl-kv-epoch as an engine
// restart, even when the new incarnation's seq has passed the old one's.
func (r *rank) checkEpoch(topic []byte, seq uint64) {
	i := bytes.Index(topic, epochKey)
	if i < 0 {
		return
	}
	ep := topic[i+len(epochKey):]
	if bytes.Equal(ep, r.epoch) {
		return
	}
	changed := r.epoch != nil
	r.epoch = append(r.epoch[:0], ep...)
	if changed && r.hasLast {
		r.restartAndCatchUp("topic epoch changed", seq)
	}
}

// fillGap replays the batches from..seq-1 that the live socket missed.
func (r *rank) fillGap(from, seq uint64) {
	r.gaps.Add(1)
	if r.met != nil {
		r.met.gaps.Inc()
	}
	if r.replay == nil {
		r.lost("gap and no replay endpoint", from, seq)
		return
	}
	r.log.Info("kv events: gap, replaying", "from", from, "live", seq)
	maxSeen, seen, _, err := r.replayFrom(from)
	if err != nil && r.ctx.Err() != nil {
		return // stopping: the replay was abandoned, not failed
	}
	if err != nil {
		r.replayFailed(err) // counted once; the hole is cleared below
		if r.hasLast && seq > r.last+1 {
			r.log.Warn("kv events: gap not recovered, clearing worker rank and rebuilding",
				"missing_from", r.last+1, "resumes_at", seq)
			r.reset()
		}
	}
	r.markCovered(maxSeen, seen, err)
}

// markCovered records, after a replay on this connection, up to which seq
// live batches are copies of what the rank already applied. A replay that
// failed covers only what it delivered: without this, the live copies of
// batches it applied before failing would be taken for an engine restart.
func (r *rank) markCovered(maxSeen uint64, seen bool, err error) {
	switch {
	case err == nil:
		r.covered, r.coveredTo = r.hasLast, r.last
	case seen && r.hasLast:
		r.covered, r.coveredTo = true, min(r.last, maxSeen)
	}
}

// replayFrom applies what the engine's buffer holds from start on. A buffer
// that starts above what the rank needs means history was lost: the rank is
// cleared and rebuilt from what the buffer has (counted as a replay failure).
// other reports that the buffer's batch at the last applied seq differs from
// the one applied (another engine incarnation); nothing after it is applied.
func (r *rank) replayFrom(start uint64) (maxSeen uint64, seen, other bool, err error) {
	r.replays.Add(1)
	if r.met != nil {
		r.met.replays.Inc()
	}
	first := true
	err = r.replay.replay(r.ctx, start, func(seq uint64, payload []byte) error {
		if seen && seq <= maxSeen {
			return fmt.Errorf("%w: %d after %d", errReplayOrder, seq, maxSeen)
		}
		maxSeen, seen = seq, true
		if other {
			return nil
		}
		if r.hasLast && seq == r.last && xxhash.Sum64(payload) != r.lastSum {
			other = true
			return nil
		}
		if first {
			first = false
			if !r.hasLast && seq > start {
				r.lost("replay buffer starts above the requested seq", start, seq)
			}
		}
		if r.hasLast {
			if seq <= r.last {
				return nil
			}
			if seq > r.last+1 {
				r.lost("replay buffer starts above the requested seq", r.last+1, seq)
			}
		}
		r.apply(seq, payload)
		return nil
	})
	return maxSeen, seen, other, err
}

// lost clears the rank after batches [want, got) could not be recovered; the
// rank is rebuilt from what arrives next.
func (r *rank) lost(why string, want, got uint64) {
	r.replayFailures.Add(1)
	if r.met != nil {
		r.met.replayFailures.Inc()
	}
	r.log.Warn("kv events: history lost, clearing worker rank and rebuilding",
		"reason", why, "missing_from", want, "resumes_at", got)
	r.reset()
}

// replayFailed records a replay request that failed outright.
func (r *rank) replayFailed(err error) {
	if r.ctx.Err() != nil {
		return
	}
	r.replayFailures.Add(1)
	if r.met != nil {
		r.met.replayFailures.Inc()
	}
	r.log.Warn("kv events: replay failed", "err", err)
}

// restart records an engine restart and clears the rank.
func (r *rank) restart(why string, last, got uint64) {
	r.restarts.Add(1)
	if r.met != nil {
		r.met.restarts.Inc()
	}
	r.log.Warn("kv events: engine restarted, clearing worker rank",
		"reason", why, "last_seq", last, "seq", got)
	r.reset()
	r.liveSeen = false
	r.lastSeq.Store(0) // nothing of the new incarnation applied yet
}

// reset clears the rank in the index and the decoder, and forgets the seq.
func (r *rank) reset() {
	r.sink.reset()
	r.hasLast, r.covered, r.fromZero = false, false, false
}

// apply decodes and applies one batch and records it as the last seq.
func (r *rank) apply(seq uint64, payload []byte) {
	r.st.reset()
	err := r.sink.apply(payload, &r.st)
	r.hasLast, r.last, r.fromZero = true, seq, false
	r.lastSum = xxhash.Sum64(payload)
	r.lastSeq.Store(seq)
	if err != nil {
		r.decodeErrors.Add(1)
		if r.met != nil {
			r.met.decodeErrors.Inc()
		}
		if r.logLimit.allow() {
			r.log.Warn("kv events: batch skipped", "seq", seq, "err", err)
		}
	}
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
}

// status reports the rank's counters.
func (r *rank) status() RankStatus {
	return RankStatus{
		DPRank:         r.dp,
		Connected:      r.conns.Load() > 0,
		LastSeq:        r.lastSeq.Load(),
		EventsApplied:  r.eventsApplied.Load(),
		Gaps:           r.gaps.Load(),
		Replays:        r.replays.Load(),
		ReplayFailures: r.replayFailures.Load(),
		EngineRestarts: r.restarts.Load(),
		Reconnects:     r.reconnects.Load(),
		DecodeErrors:   r.decodeErrors.Load(),
		CachedBlocks:   r.sink.cached(),
	}
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
