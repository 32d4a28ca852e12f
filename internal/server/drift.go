package server

import (
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Tokenization drift: a text prompt is hashed from the router's tokens; the engine it is routed
// to tokenizes the same text itself and publishes the blocks it stores, hashed from its tokens.
// When the request finishes, the engine holding every full block of the prompt under the router's
// hashes confirms the two tokenizations agree; holding fewer means they differ (a wrong tokenizer,
// template or special-token setting), which otherwise shows only as cache hits that never come.
// Only blocks the engine's events put in the index count, not the router's own predictions.
//
// The engine's last store events and the gateway's MarkFinished travel separately, and under load
// the events can reach the index after MarkFinished does: a check that finds fewer blocks is
// judged again at the first MarkFinished Grace later, and only then counted as a mismatch.

// DriftConfig configures drift detection; zero fields take defaults.
type DriftConfig struct {
	// MaxPending bounds the routed requests awaiting MarkFinished; the oldest is dropped
	// (unchecked, reason not_finished) to admit a new one.
	MaxPending int
	// Window is how many of a model's latest checks the mismatch rate is over; a WARN is
	// logged when at least MinChecks of them have a rate of WarnRate or more, at most once
	// per WarnEvery per model.
	Window    int
	MinChecks int
	WarnRate  float64
	WarnEvery time.Duration
	// Grace is how long a check that found fewer of the router's blocks waits for late events
	// before it is judged again, for good.
	Grace time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

func (c *DriftConfig) fill() {
	if c.MaxPending <= 0 {
		c.MaxPending = 1 << 16
	}
	if c.Window <= 0 {
		c.Window = 200
	}
	if c.MinChecks <= 0 {
		c.MinChecks = 20
	}
	if c.WarnRate <= 0 {
		c.WarnRate = 0.2
	}
	if c.WarnEvery <= 0 {
		c.WarnEvery = time.Minute
	}
	if c.Grace <= 0 {
		c.Grace = 5 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Reasons a routed text prompt is not checked.
const (
	uncheckedNoRequestID = "no_request_id" // nothing to match MarkFinished with
	uncheckedShort       = "short"         // under one block: no hash to compare
	uncheckedNoEvents    = "no_events"     // the worker publishes no KV events
	uncheckedNotFinished = "not_finished"  // dropped from the pending set before MarkFinished
	uncheckedNoScore     = "no_score"      // the worker left, or the model lost its workers
	uncheckedLate        = "late"          // dropped while waiting to be judged again (MaxPending)
)

type driftCheck struct {
	model, worker string
	rank          uint32
	hashes        []uint64
	seq           uint64
	due           time.Time // when a short check is judged again (zero: not looked at yet)
}

type driftWindow struct {
	outcomes []bool // ring of the latest checks: true is a mismatch
	next     int
	full     bool
	warned   time.Time
}

// driftTracker is the bookkeeping: pending checks and per-model windows. It does no I/O but
// counting and logging.
type driftTracker struct {
	cfg DriftConfig
	log *slog.Logger

	confirmed, mismatched, unchecked *prometheus.CounterVec

	mu      sync.Mutex
	pending map[string]*driftCheck
	order   []pendingRef // FIFO of pending ids, stale entries skipped
	seq     uint64
	late    []*driftCheck // short checks waiting for Grace, in due order
	windows map[string]*driftWindow
}

type pendingRef struct {
	id  string
	seq uint64
}

func newDriftTracker(cfg DriftConfig, reg prometheus.Registerer, log *slog.Logger) (*driftTracker, error) {
	cfg.fill()
	t := &driftTracker{
		cfg: cfg, log: log,
		pending: make(map[string]*driftCheck),
		windows: make(map[string]*driftWindow),
		confirmed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_tokenization_confirmed_total",
			Help: "Routed text prompts whose blocks the chosen engine then stored with the router's hashes: the router's tokens agree with the engine's.",
		}, []string{"model"}),
		mismatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_tokenization_mismatched_total",
			Help: "Routed text prompts whose blocks the chosen engine did not store with the router's hashes by MarkFinished, nor Grace (5 s) later: the router's tokens likely differ from the engine's.",
		}, []string{"model"}),
		unchecked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_tokenization_unchecked_total",
			Help: "Routed text prompts not checked against the engine, by model and reason (no_request_id, short, no_events, not_finished, no_score).",
		}, []string{"model", "reason"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{t.confirmed, t.mismatched, t.unchecked} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// routed records a routed text prompt for checking at MarkFinished.
func (t *driftTracker) routed(model, requestID, worker string, rank uint32, hashes []uint64, hasEvents bool) {
	switch {
	case requestID == "":
		t.unchecked.WithLabelValues(model, uncheckedNoRequestID).Inc()
		return
	case !hasEvents:
		t.unchecked.WithLabelValues(model, uncheckedNoEvents).Inc()
		return
	case len(hashes) == 0:
		t.unchecked.WithLabelValues(model, uncheckedShort).Inc()
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.pending) >= t.cfg.MaxPending && len(t.order) > 0 {
		ref := t.order[0]
		t.order = t.order[1:]
		if c, ok := t.pending[ref.id]; ok && c.seq == ref.seq {
			delete(t.pending, ref.id)
			t.unchecked.WithLabelValues(c.model, uncheckedNotFinished).Inc()
		}
	}
	if len(t.order) > 2*t.cfg.MaxPending { // mostly stale: compact
		live := t.order[:0]
		for _, ref := range t.order {
			if c, ok := t.pending[ref.id]; ok && c.seq == ref.seq {
				live = append(live, ref)
			}
		}
		t.order = live
	}
	t.seq++
	t.pending[requestID] = &driftCheck{model: model, worker: worker, rank: rank, hashes: hashes, seq: t.seq}
	t.order = append(t.order, pendingRef{requestID, t.seq})
}

// take removes and returns requestID's pending check.
func (t *driftTracker) take(requestID string) (*driftCheck, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.pending[requestID]
	if ok {
		delete(t.pending, requestID)
	}
	return c, ok
}

// verdict judges c given how many of its leading blocks the worker's events put in the index
// (held < 0: unknown). A first look that finds fewer blocks waits for Grace (dueLate).
func (t *driftTracker) verdict(c *driftCheck, held int) {
	switch {
	case held < 0:
		t.unchecked.WithLabelValues(c.model, uncheckedNoScore).Inc()
	case held < len(c.hashes) && c.due.IsZero():
		c.due = t.cfg.Now().Add(t.cfg.Grace)
		t.mu.Lock()
		var dropped *driftCheck
		if len(t.late) >= t.cfg.MaxPending {
			dropped, t.late = t.late[0], t.late[1:]
		}
		t.late = append(t.late, c)
		t.mu.Unlock()
		if dropped != nil {
			t.unchecked.WithLabelValues(dropped.model, uncheckedLate).Inc()
		}
	default:
		t.outcome(c.model, held < len(c.hashes))
	}
}

// dueLate removes and returns the short checks whose Grace has passed, to be judged again.
func (t *driftTracker) dueLate() []*driftCheck {
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for n < len(t.late) && !t.late[n].due.After(now) {
		n++
	}
	if n == 0 {
		return nil
	}
	out := slices.Clone(t.late[:n])
	t.late = slices.Delete(t.late, 0, n)
	return out
}

func (t *driftTracker) outcome(model string, mismatch bool) {
	if mismatch {
		t.mismatched.WithLabelValues(model).Inc()
	} else {
		t.confirmed.WithLabelValues(model).Inc()
	}
	t.mu.Lock()
	w := t.windows[model]
	if w == nil {
		w = &driftWindow{outcomes: make([]bool, t.cfg.Window)}
		t.windows[model] = w
	}
	w.outcomes[w.next] = mismatch
	w.next = (w.next + 1) % len(w.outcomes)
	w.full = w.full || w.next == 0
	n := w.next
	if w.full {
		n = len(w.outcomes)
	}
	bad := 0
	for _, m := range w.outcomes[:n] {
		if m {
			bad++
		}
	}
	now := t.cfg.Now()
	warn := n >= t.cfg.MinChecks && float64(bad) >= t.cfg.WarnRate*float64(n) && (w.warned.IsZero() || now.Sub(w.warned) >= t.cfg.WarnEvery)
	if warn {
		w.warned = now
	}
	t.mu.Unlock()
	if warn {
		t.log.Warn("tokenization drift: the engine does not store the router's blocks for this model's text prompts; check the model's tokenizer files, chat template and special-token settings against the engine's",
			"model", model, "mismatched", bad, "checked", n)
	}
}

func (t *driftTracker) pendingCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}
