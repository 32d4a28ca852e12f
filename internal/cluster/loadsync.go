package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/internal/scoring"
)

// LoadState is the load and prediction state a replica shares:
// *scoring.Router.
type LoadState interface {
	ApplyRemote(origin string, c *scoring.LoadChange) error
	LocalLoad() []scoring.LoadChange
	ResetRemote(origin string, state []scoring.LoadChange) (released, added int)
	LoadDigest(origin string) (n int, sum uint64)
}

// Timeouts and bounds of the state requests.
const (
	stateTimeout  = 2 * time.Second
	statePartSize = 256 << 10
	originIdle    = 10 * time.Minute
	// maxHeldBytes bounds the changes messages kept while states are
	// fetched (all origins together); past it the origin is resynced again.
	maxHeldBytes = 32 << 20
	// maxBootstrapOrigins bounds the replicas a bootstrap collects state
	// from: a peer answering as many origins is not one replica.
	maxBootstrapOrigins = 256
)

// loadSync receives the other replicas' changes, answers their state
// requests and asks for theirs when the tracker says so.
type loadSync struct {
	n *Node

	mu      sync.Mutex
	ls      LoadState
	trk     *tracker
	pending map[string]string // origin -> reason, waiting for the resyncer
	held    map[string]*held  // origin -> changes received while its state is fetched
	holdAll bool              // bootstrapping: hold every origin's changes
	heldLen int               // bytes in held
	subs    []*nats.Subscription
	wake    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup

	scratch scoring.LoadChange // the receiving goroutine's
	twin    atomic.Bool        // another process with this replica id was logged
}

func (s *loadSync) init(n *Node) {
	s.n = n
	s.trk = newTracker()
	s.pending = make(map[string]string)
	s.held = make(map[string]*held)
	s.wake = make(chan struct{}, 1)
	s.done = make(chan struct{})
}

func (s *loadSync) state() LoadState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ls
}

// StartLoad shares ls with the other replicas: it subscribes to their
// changes and state requests, then collects their state for
// Config.BootstrapWait, so that the replica starts with the cluster's load.
// It returns the number of replicas whose state it applied.
func (n *Node) StartLoad(ls LoadState) (int, error) {
	s := &n.sync
	s.mu.Lock()
	if s.ls != nil {
		s.mu.Unlock()
		return 0, errors.New("cluster: StartLoad called twice")
	}
	s.ls = ls
	s.holdAll = true // until bootstrap has applied the states it collected
	s.mu.Unlock()
	for _, sub := range []struct {
		subject string
		fn      nats.MsgHandler
	}{
		{n.loadSubject("*"), s.onChanges},
		{n.stateSubject(n.cfg.ReplicaID), s.onStateRequest},
		{n.stateSubject(""), s.onStateRequest},
	} {
		ns, err := n.nc.Subscribe(sub.subject, sub.fn)
		if err != nil {
			return 0, fmt.Errorf("cluster: subscribe %s: %w", sub.subject, err)
		}
		_ = ns.SetPendingLimits(1<<16, 256<<20)
		s.mu.Lock()
		s.subs = append(s.subs, ns)
		s.mu.Unlock()
	}
	peers, err := s.bootstrap()
	s.wg.Go(s.resyncer)
	return peers, err
}

// originKey is what the Router knows another replica's requests by: its
// id and epoch, so that the requests of a replica that restarted under the
// same id stay (until finished or expired) and are not taken for the new
// process's when the two are compared.
func originKey(id string, epoch uint64) string {
	return id + "/" + strconv.FormatUint(epoch, 36)
}

// onChanges applies a changes message of another replica.
func (s *loadSync) onChanges(m *nats.Msg) {
	met := s.n.metrics
	met.messages.WithLabelValues("in").Inc()
	met.bytes.WithLabelValues("in").Add(float64(len(m.Data)))
	d, h, count, err := decodeHeader(m.Data)
	if err == nil && h.Kind != kindChanges {
		err = fmt.Errorf("%w: a state part on a changes subject", ErrMalformed)
	}
	if err != nil {
		met.changes.WithLabelValues(changeMalformed).Inc()
		s.n.log.Warn("load message refused", "subject", m.Subject, "err", err)
		return
	}
	if h.Origin == s.n.cfg.ReplicaID {
		// NoEcho: not this process's own. Two replicas under one id answer
		// each other's state requests and drop each other's changes.
		if h.Epoch != s.n.epoch && !s.twin.Swap(true) {
			s.n.log.Error("another process publishes load under this replica's id; give each replica its own --replica-id", "replica_id", h.Origin)
		}
		return
	}
	s.mu.Lock()
	v := s.trk.changes(h.Origin, h.Epoch, h.Seq, time.Now())
	if v.apply {
		s.holdLocked(h.Origin, m.Data)
	}
	s.mu.Unlock()
	if v.full {
		met.changes.WithLabelValues(changeTooManyOrigins).Inc()
		s.n.log.Warn("load message refused: too many origins", "origin", h.Origin, "max", maxOrigins)
		return
	}
	ls := s.state()
	origin := originKey(h.Origin, h.Epoch)
	if v.apply {
		routed := false
		for range count {
			if err := d.next(&s.scratch); err != nil {
				met.changes.WithLabelValues(changeMalformed).Inc()
				s.n.log.Warn("load message refused", "origin", h.Origin, "seq", h.Seq, "err", err)
				v.resync = resyncGap // what followed is lost
				break
			}
			routed = routed || s.scratch.Kind == scoring.ChangeRoute
			s.apply(ls, origin, &s.scratch)
		}
		if routed {
			s.mu.Lock()
			s.trk.routedAt(h.Origin, time.Now())
			s.mu.Unlock()
		}
	}
	if h.HasDigest && v.resync == "" {
		cnt, sum := ls.LoadDigest(origin)
		s.mu.Lock()
		v = s.trk.digest(h.Origin, h.Epoch, h.Digest, Digest{Count: uint64(cnt), Sum: sum})
		s.mu.Unlock()
	}
	if v.resync != "" {
		s.request(h.Origin, v.resync)
	}
}

func (s *loadSync) apply(ls LoadState, origin string, c *scoring.LoadChange) {
	err := ls.ApplyRemote(origin, c)
	res := changeApplied
	switch {
	case err == nil:
	case errors.Is(err, scoring.ErrNotFound):
		res = changeUnknownWorker
	default:
		res = changeRefused
	}
	s.n.metrics.changes.WithLabelValues(res).Inc()
}

// request queues a state request to origin.
func (s *loadSync) request(origin, reason string) {
	s.mu.Lock()
	if _, ok := s.pending[origin]; !ok {
		s.pending[origin] = reason
	}
	s.mu.Unlock()
	signal(s.wake)
}

// lost queues a state request to every replica heard from: after a
// reconnect or a slow consumer, anything may have been missed.
func (s *loadSync) lost(reason string) {
	s.mu.Lock()
	for _, o := range s.trk.known() {
		if _, ok := s.pending[o]; !ok {
			s.pending[o] = reason
		}
	}
	s.mu.Unlock()
	signal(s.wake)
}

// resyncer asks the pending origins for their state, one at a time, and
// forgets the origins that went silent.
func (s *loadSync) resyncer() {
	prune := time.NewTicker(time.Minute)
	defer prune.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-prune.C:
			s.mu.Lock()
			s.trk.prune(time.Now(), originIdle)
			s.mu.Unlock()
			continue
		case <-s.wake:
		}
		for {
			s.mu.Lock()
			var origin, reason string
			for o, r := range s.pending {
				origin, reason = o, r
				break
			}
			delete(s.pending, origin)
			s.mu.Unlock()
			if origin == "" {
				break
			}
			s.n.metrics.resyncs.WithLabelValues(reason).Inc()
			if err := s.resync(origin); err != nil {
				s.n.metrics.resyncFails.Inc()
				s.n.log.Warn("load resync failed; the next digest tries again", "origin", origin, "reason", reason, "err", err)
			}
		}
	}
}

// resync asks origin for its state and makes its requests here that.
func (s *loadSync) resync(origin string) error {
	s.mu.Lock()
	s.held[origin] = &held{}
	s.mu.Unlock()
	defer s.unhold(origin)
	inbox := s.n.nc.NewRespInbox()
	sub, err := s.n.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.n.nc.PublishRequest(s.n.stateSubject(origin), inbox, nil); err != nil {
		return err
	}
	st := &stateParts{max: s.n.cfg.MaxStateChanges}
	deadline := time.Now().Add(stateTimeout)
	for !st.done {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return fmt.Errorf("state of %s: %w", origin, err)
		}
		if err := st.add(m.Data); err != nil {
			return fmt.Errorf("state of %s: %w", origin, err)
		}
	}
	if st.h.Origin != origin {
		return fmt.Errorf("state of %s: %w: the reply is %s's", origin, ErrMalformed, st.h.Origin)
	}
	s.applyState(st)
	return nil
}

// applyState makes the origin's requests here those of its state, then
// applies again the origin's changes held since the state was asked for
// that came after it: one applied before ResetRemote was undone by it (an
// add released as not in the state).
func (s *loadSync) applyState(st *stateParts) {
	ls := s.state()
	origin := originKey(st.h.Origin, st.h.Epoch)
	released, added := ls.ResetRemote(origin, st.changes)
	s.mu.Lock()
	s.trk.synced(st.h.Origin, st.h.Epoch, st.h.Seq, time.Now())
	// The messages held so far, taken under the lock (onChanges goes on
	// appending); one held after this is applied by onChanges after the
	// reset.
	var msgs [][]byte
	full := false
	if hd := s.held[st.h.Origin]; hd != nil {
		msgs, full = hd.msgs, hd.full
	}
	s.mu.Unlock()
	replayed := 0
	for _, b := range msgs {
		replayed += s.replay(ls, origin, &st.h, b)
	}
	if full {
		s.request(st.h.Origin, resyncHeld)
	}
	s.n.log.Debug("load resynchronised", "origin", st.h.Origin, "requests", len(st.changes), "released", released, "added", added, "replayed", replayed)
}

// held is an origin's changes messages received while its state is
// fetched.
type held struct {
	msgs [][]byte
	full bool // some were not kept: resync again
}

// holdLocked keeps a copy of a changes message of origin if its state is
// being fetched. The caller holds s.mu.
func (s *loadSync) holdLocked(origin string, b []byte) {
	hd := s.held[origin]
	if hd == nil {
		if !s.holdAll || len(s.held) >= maxBootstrapOrigins {
			return
		}
		hd = &held{}
		s.held[origin] = hd
	}
	if hd.full {
		return
	}
	if s.heldLen+len(b) > maxHeldBytes {
		hd.full = true
		return
	}
	hd.msgs = append(hd.msgs, bytes.Clone(b))
	s.heldLen += len(b)
}

// unhold forgets the messages held for origin.
func (s *loadSync) unhold(origin string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hd := s.held[origin]; hd != nil {
		for _, b := range hd.msgs {
			s.heldLen -= len(b)
		}
		delete(s.held, origin)
	}
}

// replay applies again a held changes message that came after the state
// st was taken at; it returns the changes applied.
func (s *loadSync) replay(ls LoadState, origin string, st *Header, b []byte) int {
	d, h, count, err := decodeHeader(b)
	if err != nil || h.Epoch != st.Epoch || h.Seq <= st.Seq {
		return 0
	}
	var c scoring.LoadChange
	n := 0
	for range count {
		if d.next(&c) != nil {
			break // refused and counted when it arrived
		}
		_ = ls.ApplyRemote(origin, &c) // counted when it arrived
		n++
	}
	return n
}

// stateParts collects a state reply's parts.
type stateParts struct {
	h       Header
	changes []scoring.LoadChange
	done    bool
	max     int // changes at most: a state reply is at most a replica's requests and marks
}

func (p *stateParts) add(b []byte) error {
	d, h, n, err := decodeHeader(b)
	if err != nil {
		return err
	}
	if h.Kind != kindState {
		return fmt.Errorf("%w: a changes message in a state reply", ErrMalformed)
	}
	if p.h.Origin != "" && (h.Origin != p.h.Origin || h.Epoch != p.h.Epoch) {
		return fmt.Errorf("%w: state parts of %s and %s mixed", ErrMalformed, p.h.Origin, h.Origin)
	}
	p.h = h
	if len(p.changes)+n > p.max {
		return fmt.Errorf("%w: a state of more than %d changes", ErrMalformed, p.max)
	}
	for range n {
		var c scoring.LoadChange
		if err := d.next(&c); err != nil {
			return err
		}
		p.changes = append(p.changes, c)
	}
	p.done = h.Last
	return nil
}

// onStateRequest answers with this replica's own requests, in parts.
func (s *loadSync) onStateRequest(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	seq := s.n.pub.lastSeq() // the state holds at least every change up to seq
	state := s.state().LocalLoad()
	h := Header{Kind: kindState, Origin: s.n.cfg.ReplicaID, Epoch: s.n.epoch, Seq: seq}
	var body []byte
	n := 0
	send := func(last bool) {
		h.Last = last
		msg := appendHeader(nil, &h, n)
		msg = append(msg, body...)
		if err := s.n.nc.Publish(m.Reply, msg); err != nil {
			s.n.log.Warn("load state reply not sent", "err", err)
		}
		body, n = body[:0], 0
	}
	sentLast := false
	for i := range state {
		body = appendChange(body, &state[i])
		n++
		if len(body) >= statePartSize {
			sentLast = i == len(state)-1
			send(sentLast)
		}
	}
	if !sentLast {
		send(true)
	}
}

// bootstrap asks every replica for its state and applies the complete
// replies that arrive within BootstrapWait. The changes messages received
// meanwhile are held, and those past each state applied again after it.
func (s *loadSync) bootstrap() (int, error) {
	defer func() {
		s.mu.Lock()
		s.holdAll = false
		clear(s.held)
		s.heldLen = 0
		s.mu.Unlock()
	}()
	inbox := s.n.nc.NewRespInbox()
	sub, err := s.n.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, fmt.Errorf("cluster: bootstrap: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.n.nc.PublishRequest(s.n.stateSubject(""), inbox, nil); err != nil {
		return 0, fmt.Errorf("cluster: bootstrap: %w", err)
	}
	parts := map[string]*stateParts{}
	var done []*stateParts
	deadline := time.Now().Add(s.n.cfg.BootstrapWait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break // the wait is over
		}
		if p := s.bootstrapPart(parts, m.Data); p != nil {
			done = append(done, p)
		}
	}
	for _, p := range done {
		s.n.metrics.resyncs.WithLabelValues(resyncBootstrap).Inc()
		s.applyState(p)
		// An origin first heard mid-stream during the wait asked for a
		// resync; its state, taken after this replica subscribed, and the
		// changes held since cover what it would bring.
		s.mu.Lock()
		if s.pending[p.h.Origin] == resyncNew {
			delete(s.pending, p.h.Origin)
		}
		s.mu.Unlock()
	}
	return len(done), nil
}

// bootstrapPart adds a state reply part to its origin's; it returns the
// origin's state when b was its last part.
func (s *loadSync) bootstrapPart(parts map[string]*stateParts, b []byte) *stateParts {
	_, h, _, err := decodeHeader(b)
	if err != nil {
		s.n.log.Warn("bootstrap: state reply refused", "err", err)
		return nil
	}
	p := parts[h.Origin]
	if p == nil {
		if len(parts) >= maxBootstrapOrigins {
			s.n.log.Warn("bootstrap: state reply refused: too many origins", "origin", h.Origin, "max", maxBootstrapOrigins)
			return nil
		}
		p = &stateParts{max: s.n.cfg.MaxStateChanges}
		parts[h.Origin] = p
	}
	if p.done {
		return nil // a second reply of the origin
	}
	if err := p.add(b); err != nil {
		s.n.log.Warn("bootstrap: state reply refused", "origin", h.Origin, "err", err)
		p.done, p.changes = true, nil // refuse its later parts too
		return nil
	}
	if p.done {
		return p
	}
	return nil
}

func (s *loadSync) close() {
	s.mu.Lock()
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	s.wg.Wait()
}
