package cluster

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/internal/scoring"
)

// One replica decides for the cluster. Replicas that each decide part of a
// burst decide it on the same state, none seeing the others' choices until
// the sync lag has passed, and pile it on the ranks that were cheapest
// before any of it (docs/replicas.md measures it). So every replica
// forwards its Routes, checked and hashed, to the decider, which decides
// each with the load of every one decided before it in place, as one
// router does, records them and shares them with its changes; the forwarding
// replica answers its caller with the decider's decision. The decider is
// the longest-running live replica (the oldest epoch, ties by id): a
// replica that restarts or joins does not take the place of one that has
// been deciding, and every replica that hears the same heartbeats names
// the same one. A replica whose decider does not answer within
// Config.DecideTimeout decides itself (spread.go keeps those apart) and
// does not ask that decider again for decideBackoff; replicas that name
// different deciders for a moment (one's heartbeat reached one and not the
// other yet) only decide apart as they would without forwarding.
//
// The decider answers forwarded Routes as its own gRPC handlers answer
// Routes, several at once (up to GOMAXPROCS, then in the subscription's
// goroutine, which holds back the rest): the part of a burst forwarded
// from other replicas does not queue behind itself, and every Route still
// sees the load of those decided before it.

// decideBackoff is how long a replica decides itself after its decider
// failed to answer: long enough that a dead decider costs one timeout a
// replica, short against the live window after which another is named.
const decideBackoff = time.Second

// liveHeartbeats is how many heartbeat intervals a replica stays live
// after its last message.
const liveHeartbeats = 3

// decide is a Node's forwarding and serving of Routes.
type decide struct {
	serving atomic.Bool // ServeDecisions was called: forward too

	mu       sync.Mutex
	failed   string // the decider that last failed to answer
	until    time.Time
	bufs     sync.Pool // *[]byte: route messages
	sub      *nats.Subscription
	decideFn func(*scoring.Decision, *scoring.ForwardedRoute) error

	work    sync.Pool     // *serveScratch
	workers chan struct{} // a token per Route being decided off the subscription's goroutine
}

// serveScratch is one forwarded Route's decoding, decision and answer.
type serveScratch struct {
	fr  scoring.ForwardedRoute
	dec scoring.Decision
	out []byte
}

func (n *Node) decideSubject(id string) string { return n.cfg.Prefix + ".decide." + id }

// Decider is the replica deciding for the cluster, as this replica sees it
// now.
func (n *Node) Decider() string {
	s := &n.sync
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trk.decider(n.cfg.ReplicaID, n.epoch, now, n.liveWindow())
}

// liveWindow is how long a replica counts as live after its last message.
func (n *Node) liveWindow() time.Duration { return liveHeartbeats * n.cfg.HeartbeatInterval }

// Forward is the scoring Router's Config.Forward: it passes fr to the
// decider and fills dec with its decision. It returns false, for the Route
// to be decided here, when this replica is the decider, does not serve
// decisions itself (ServeDecisions), or the decider refused the Route, did
// not answer within Config.DecideTimeout or failed to within
// decideBackoff. A request id active on the decider is refused for the
// cluster: true with scoring.ErrAlreadyExists.
func (n *Node) Forward(fr *scoring.ForwardedRoute, dec *scoring.Decision) (bool, error) {
	d := &n.decide
	if !d.serving.Load() {
		return false, nil
	}
	to := n.Decider()
	if to == n.cfg.ReplicaID {
		return false, nil
	}
	met := n.metrics
	start := time.Now()
	d.mu.Lock()
	backingOff := d.failed == to && start.Before(d.until)
	d.mu.Unlock()
	if backingOff {
		met.decisions.WithLabelValues(decisionUnreachable).Inc()
		return false, nil
	}
	bp, _ := d.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	*bp = appendRoute((*bp)[:0], fr)
	reply, err := n.nc.Request(n.decideSubject(to), *bp, n.cfg.DecideTimeout)
	d.bufs.Put(bp)
	if err != nil {
		d.mu.Lock()
		d.failed, d.until = to, time.Now().Add(decideBackoff)
		d.mu.Unlock()
		met.decisions.WithLabelValues(decisionUnreachable).Inc()
		n.log.Warn("the deciding replica did not answer; deciding here", "decider", to, "backoff", decideBackoff, "err", err)
		return false, nil
	}
	met.forwardSeconds.Observe(time.Since(start).Seconds())
	refused, err := decodeDecision(reply.Data, dec)
	switch {
	case err != nil:
		met.decisions.WithLabelValues(decisionMalformed).Inc()
		n.log.Warn("the deciding replica's answer refused; deciding here", "decider", to, "err", err)
		return false, nil
	case refused != nil && refused.class == refusedAlreadyExists:
		met.decisions.WithLabelValues(decisionRefused).Inc()
		return true, fmt.Errorf("%w: on the deciding replica %s: %s", scoring.ErrAlreadyExists, to, refused.msg)
	case refused != nil:
		met.decisions.WithLabelValues(decisionRefused).Inc()
		n.log.Debug("the deciding replica refused a Route; deciding here", "decider", to, "err", refused.msg)
		return false, nil
	}
	met.decisions.WithLabelValues(decisionForwarded).Inc()
	return true, nil
}

// ServeDecisions answers the Routes other replicas forward with decide
// (the scoring Router's RouteForwarded), and turns this replica's own
// forwarding on. Call it once the Router is ready to route: once it
// serves, this replica can be named the decider.
func (n *Node) ServeDecisions(decide func(*scoring.Decision, *scoring.ForwardedRoute) error) error {
	d := &n.decide
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sub != nil {
		return errors.New("cluster: ServeDecisions called twice")
	}
	d.decideFn = decide
	d.workers = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	sub, err := n.nc.Subscribe(n.decideSubject(n.cfg.ReplicaID), n.serveDecision)
	if err != nil {
		return fmt.Errorf("cluster: subscribe %s: %w", n.decideSubject(n.cfg.ReplicaID), err)
	}
	_ = sub.SetPendingLimits(1<<16, 256<<20)
	d.sub = sub
	d.serving.Store(true)
	return nil
}

// serveDecision answers one forwarded Route, on a goroutine of its own
// while fewer than GOMAXPROCS are deciding, else on the subscription's.
func (n *Node) serveDecision(m *nats.Msg) {
	d := &n.decide
	select {
	case d.workers <- struct{}{}:
		// Not waited for on Close: an answer after it fails to send, and
		// its sender decides itself.
		go func() {
			n.answer(m)
			<-d.workers
		}()
	default:
		n.answer(m)
	}
}

// answer decides a forwarded Route and answers it. A message that does
// not decode gets no answer: its sender times out and decides itself.
func (n *Node) answer(m *nats.Msg) {
	d := &n.decide
	met := n.metrics
	w, _ := d.work.Get().(*serveScratch)
	if w == nil {
		w = new(serveScratch)
	}
	defer d.work.Put(w)
	if err := decodeRoute(m.Data, &w.fr); err != nil {
		met.decisions.WithLabelValues(decisionMalformed).Inc()
		n.log.Warn("forwarded Route refused", "subject", m.Subject, "err", err)
		return
	}
	if err := d.decideFn(&w.dec, &w.fr); err != nil {
		w.out = appendRefused(w.out[:0], err)
		met.decisions.WithLabelValues(decisionServedRefused).Inc()
	} else {
		w.out = appendDecision(w.out[:0], &w.dec)
		met.decisions.WithLabelValues(decisionServed).Inc()
	}
	if err := m.Respond(w.out); err != nil {
		n.log.Debug("forwarded Route's answer not sent", "err", err)
	}
}

// stopServing unsubscribes from forwarded Routes.
func (d *decide) stopServing() {
	d.serving.Store(false)
	d.mu.Lock()
	sub := d.sub
	d.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
}
