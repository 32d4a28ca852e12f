package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
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

// Timeouts of the state requests.
const (
	stateTimeout  = 2 * time.Second
	statePartSize = 256 << 10
	originIdle    = 10 * time.Minute
)

// loadSync receives the other replicas' changes, answers their state
// requests and asks for theirs when the tracker says so.
type loadSync struct {
	n *Node

	mu      sync.Mutex
	ls      LoadState
	trk     *tracker
	pending map[string]string // origin -> reason, waiting for the resyncer
	subs    []*nats.Subscription
	wake    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup

	scratch scoring.LoadChange // the receiving goroutine's
}

func (s *loadSync) init(n *Node) {
	s.n = n
	s.trk = newTracker()
	s.pending = make(map[string]string)
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
		return
	}
	s.mu.Lock()
	v := s.trk.changes(h.Origin, h.Epoch, h.Seq, time.Now())
	s.mu.Unlock()
	ls := s.state()
	origin := originKey(h.Origin, h.Epoch)
	if v.apply {
		for range count {
			if err := d.next(&s.scratch); err != nil {
				met.changes.WithLabelValues(changeMalformed).Inc()
				s.n.log.Warn("load message refused", "origin", h.Origin, "seq", h.Seq, "err", err)
				v.resync = resyncGap // what followed is lost
				break
			}
			s.apply(ls, origin, &s.scratch)
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
	inbox := s.n.nc.NewRespInbox()
	sub, err := s.n.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.n.nc.PublishRequest(s.n.stateSubject(origin), inbox, nil); err != nil {
		return err
	}
	st := &stateParts{}
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
	s.applyState(st)
	return nil
}

// applyState makes the origin's requests here those of its state.
func (s *loadSync) applyState(st *stateParts) {
	released, added := s.state().ResetRemote(originKey(st.h.Origin, st.h.Epoch), st.changes)
	s.mu.Lock()
	s.trk.synced(st.h.Origin, st.h.Epoch, st.h.Seq, time.Now())
	s.mu.Unlock()
	s.n.log.Debug("load resynchronised", "origin", st.h.Origin, "requests", len(st.changes), "released", released, "added", added)
}

// stateParts collects a state reply's parts.
type stateParts struct {
	h       Header
	changes []scoring.LoadChange
	done    bool
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
// replies that arrive within BootstrapWait.
func (s *loadSync) bootstrap() (int, error) {
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
	synced := 0
	deadline := time.Now().Add(s.n.cfg.BootstrapWait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break // the wait is over
		}
		_, h, _, herr := decodeHeader(m.Data)
		if herr != nil {
			s.n.log.Warn("bootstrap: state reply refused", "err", herr)
			continue
		}
		p := parts[h.Origin]
		if p == nil {
			p = &stateParts{}
			parts[h.Origin] = p
		}
		if err := p.add(m.Data); err != nil {
			s.n.log.Warn("bootstrap: state reply refused", "origin", h.Origin, "err", err)
			delete(parts, h.Origin)
			continue
		}
		if p.done {
			s.n.metrics.resyncs.WithLabelValues(resyncBootstrap).Inc()
			s.applyState(p)
			synced++
		}
	}
	return synced, nil
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
