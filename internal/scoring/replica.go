package scoring

import (
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Replicas of a router share their load and predictions: every change a
// Route or a mark makes here is reported to Config.OnChange, and a change
// another replica reported is applied with ApplyRemote. Changes are
// idempotent: a Route applied twice adds its load once, a finish of a
// request not (yet) known leaves a tombstone that drops the request's late
// add. Expiry is not reported: every replica expires a request RequestTTL
// after it learned of it.

// ChangeKind is what a LoadChange did.
type ChangeKind uint8

// Kinds of LoadChange.
const (
	// ChangeRoute: a Route chose WorkerID/DPRank; Predicted are the
	// overlay keys it predicted there, and with a RequestID the request's
	// load was added.
	ChangeRoute ChangeKind = iota + 1
	// ChangePrefillDone: MarkPrefillDone(RequestID).
	ChangePrefillDone
	// ChangeFinished: MarkFinished(RequestID).
	ChangeFinished
)

// LoadChange is one change to the load and prediction state.
type LoadChange struct {
	Kind      ChangeKind
	RequestID string
	WorkerID  string
	DPRank    uint32

	PrefillBlocks int64
	PrefillTokens int64
	DecodeBlocks  int64
	// PrefillDone, in a state transfer (LocalLoad), says the request is
	// past prefill already.
	PrefillDone bool
	// TTL is the request's remaining life; 0 means RequestTTL.
	TTL time.Duration
	// Predicted are overlay keys (radix.PrefixKeys of the prompt's
	// blocks). In a change passed to OnChange the slice is valid only
	// during the call.
	Predicted []uint64
}

// tombstoneTTL is how long a finished request id drops a late add of it
// (a Route's change that arrives after another replica's finish, or a
// state transfer that still holds it).
const tombstoneTTL = 30 * time.Second

// remoteState is the loadTable's replica bookkeeping. Guarded by
// loadTable.mu.
type remoteState struct {
	tombs   map[string]tomb
	order   []tombRef // tombstones in expiry order
	dropped int64     // remote adds refused (full table)
}

type tomb struct {
	expires     time.Time
	finished    bool // a finish arrived first: drop the add
	prefillDone bool // a prefill-done arrived first: apply it on add
}

type tombRef struct {
	id      string
	expires time.Time
}

// mark records that id was finished (or its prefill done) ahead of its add.
// Tombstones are bounded by the table's request limit: the oldest goes
// first.
func (t *loadTable) mark(id string, finished bool, now time.Time) {
	rs := &t.remote
	if rs.tombs == nil {
		rs.tombs = make(map[string]tomb)
	}
	t.expireTombs(now)
	// A mark of an id tombstoned already appends a second ref (the tomb's
	// new expiry): order is bounded too, else a peer repeating one mark
	// grows it by every repetition for tombstoneTTL. A ref that is not its
	// tomb's latest goes without the tomb.
	for len(rs.order) > 0 && (len(rs.tombs) >= t.max || len(rs.order) >= 2*t.max) {
		ref := rs.order[0]
		if tb, ok := rs.tombs[ref.id]; ok && tb.expires.Equal(ref.expires) {
			delete(rs.tombs, ref.id)
		}
		rs.order = rs.order[1:]
	}
	tb := rs.tombs[id]
	tb.expires = now.Add(tombstoneTTL)
	if finished {
		tb.finished = true
	} else {
		tb.prefillDone = true
	}
	rs.tombs[id] = tb
	rs.order = append(rs.order, tombRef{id: id, expires: tb.expires})
}

func (t *loadTable) expireTombs(now time.Time) {
	rs := &t.remote
	i := 0
	for ; i < len(rs.order) && now.After(rs.order[i].expires); i++ {
		if tb, ok := rs.tombs[rs.order[i].id]; ok && !now.Before(tb.expires) {
			delete(rs.tombs, rs.order[i].id)
		}
	}
	rs.order = rs.order[i:]
}

// markShared is MarkPrefillDone or MarkFinished with replicas: it applies
// the mark and reports it. A mark of a request this replica does not know
// is not an error: the request may have been routed on another replica
// whose change has not arrived yet. It is reported, and tombstoned here so
// that the late add is dropped; so is a mark of another replica's request,
// which that replica may send again in a state transfer before it has
// applied the mark. A mark of this replica's own request needs none: no
// one sends it back.
func (r *Router) markShared(kind ChangeKind, id string) error {
	now := r.cfg.now()
	t := r.load
	t.mu.Lock()
	q, ok := t.requests[id]
	if !ok || q.origin != "" {
		t.mark(id, kind == ChangeFinished, now)
	}
	switch {
	case !ok:
	case kind == ChangeFinished:
		t.release(q)
	default:
		t.markPrefillDone(q, now, true)
	}
	t.mu.Unlock()
	r.cfg.OnChange(LoadChange{Kind: kind, RequestID: id})
	return nil
}

// reportRoute passes a Route's change to OnChange. The caller holds r.mu's
// read lock.
func (r *Router) reportRoute(id string, chosen *rank, pb, pt, db int64, predicted []uint64) {
	if r.cfg.OnChange == nil {
		return
	}
	r.cfg.OnChange(LoadChange{Kind: ChangeRoute, RequestID: id, WorkerID: chosen.key.ID, DPRank: chosen.key.DPRank,
		PrefillBlocks: pb, PrefillTokens: pt, DecodeBlocks: db, Predicted: predicted})
}

// ApplyRemote applies a change another replica (origin) reported. It is
// idempotent: a request already active keeps its first add (unless a third
// replica made it: then the later Route, a retry, replaces it), a request
// finished here first is not added again. A Route on a worker not
// registered here is refused with ErrNotFound (the registry has not
// propagated yet, or the worker is gone); a full request table refuses the
// add with ErrResourceExhausted.
func (r *Router) ApplyRemote(origin string, c *LoadChange) error {
	now := r.cfg.now()
	switch c.Kind {
	case ChangeRoute:
		return r.applyRoute(origin, c, now)
	case ChangePrefillDone, ChangeFinished:
		r.load.mu.Lock()
		defer r.load.mu.Unlock()
		if q, ok := r.load.requests[c.RequestID]; ok {
			if c.Kind == ChangeFinished {
				r.load.release(q)
			} else {
				r.load.markPrefillDone(q, now, true)
			}
		}
		r.load.mark(c.RequestID, c.Kind == ChangeFinished, now)
		return nil
	}
	return fmt.Errorf("%w: change kind %d", ErrInvalidArgument, c.Kind)
}

func (r *Router) applyRoute(origin string, c *LoadChange, now time.Time) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rk := r.ranks[kv.WorkerRank{ID: c.WorkerID, DPRank: c.DPRank}]
	if rk == nil {
		return fmt.Errorf("%w: worker %q rank %d is not registered here", ErrNotFound, c.WorkerID, c.DPRank)
	}
	if len(c.Predicted) > 0 {
		rk.model.overlay.predict(rk, c.Predicted, now)
	}
	if c.RequestID == "" {
		return nil
	}
	ttl := c.TTL
	if ttl <= 0 || ttl > r.cfg.RequestTTL {
		ttl = r.cfg.RequestTTL
	}
	return r.load.addRemote(origin, c, rk, now, now.Add(ttl))
}

// addRemote adds a request another replica routed, unless it is active
// already or tombstoned as finished. Active for a third replica, it is
// replaced: a gateway's retry of a Route that one did not answer (see
// loadTable.add); active as this replica's own, this one's Route stands.
func (t *loadTable) addRemote(origin string, c *LoadChange, rk *rank, now, expires time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q, ok := t.requests[c.RequestID]; ok {
		if q.origin == "" || q.origin == origin {
			if c.PrefillDone { // a state transfer: the prefill-done may have been missed
				t.markPrefillDone(q, now, false)
			}
			return nil
		}
		t.release(q)
	}
	t.expireTombs(now)
	tb, marked := t.remote.tombs[c.RequestID]
	if marked && tb.finished {
		return nil
	}
	if len(t.requests) >= t.max {
		t.remote.dropped++
		return fmt.Errorf("%w: remote request %q not added: %d requests are active, the limit", ErrResourceExhausted, c.RequestID, len(t.requests))
	}
	q := t.insertLocked(c.RequestID, origin, rk, c.PrefillBlocks, c.PrefillTokens, c.DecodeBlocks, expires)
	if c.PrefillDone || (marked && tb.prefillDone) {
		t.markPrefillDone(q, now, false)
	}
	return nil
}

// LocalLoad returns the state another replica asks for when it has missed
// changes: the active requests this replica routed itself, as ChangeRoute
// changes with their remaining TTL, then the marks it holds tombstones of
// (recent finishes and prefill-dones, of any replica's requests), so that a
// mark lost on the way still reaches the request's own replica.
func (r *Router) LocalLoad() []LoadChange {
	now := r.cfg.now()
	r.load.expire(now)
	r.load.mu.Lock()
	defer r.load.mu.Unlock()
	var out []LoadChange
	r.load.expireTombs(now)
	for id, tb := range r.load.remote.tombs {
		kind := ChangeFinished
		if !tb.finished {
			kind = ChangePrefillDone
		}
		out = append(out, LoadChange{Kind: kind, RequestID: id})
	}
	for q := r.load.head; q != nil; q = q.next {
		if q.origin != "" {
			continue
		}
		out = append(out, LoadChange{Kind: ChangeRoute, RequestID: q.id, WorkerID: q.rank.key.ID, DPRank: q.rank.key.DPRank,
			PrefillBlocks: q.prefillBlocks, PrefillTokens: q.prefillTokens, DecodeBlocks: q.decodeBlocks,
			PrefillDone: q.prefillDone, TTL: max(q.expires.Sub(now), time.Millisecond)})
	}
	return out
}

// ResetRemote makes the requests of origin those of state (a LocalLoad of
// that replica): requests of origin not in state are released, the missing
// ones added (unless tombstoned here). It returns how many were released and
// added.
func (r *Router) ResetRemote(origin string, state []LoadChange) (released, added int) {
	if origin == "" {
		return 0, 0
	}
	keep := make(map[string]bool, len(state))
	for i := range state {
		if state[i].Kind == ChangeRoute {
			keep[state[i].RequestID] = true
		}
	}
	r.load.mu.Lock()
	for q := r.load.head; q != nil; {
		next := q.next
		if q.origin == origin && !keep[q.id] {
			r.load.release(q)
			released++
		}
		q = next
	}
	before := len(r.load.requests)
	r.load.mu.Unlock()
	for i := range state {
		c := state[i]
		c.Predicted = nil
		_ = r.ApplyRemote(origin, &c) // a refusal is the digest's to notice
	}
	r.load.mu.Lock()
	added = len(r.load.requests) - before
	r.load.mu.Unlock()
	return released, max(added, 0)
}

// LoadDigest sums the active requests of origin ("" for this replica's own):
// their count and the xor of their ids' hashes, kept as requests come and
// go. Replicas compare digests to notice that they have drifted apart.
func (r *Router) LoadDigest(origin string) (n int, sum uint64) {
	r.load.expire(r.cfg.now())
	r.load.mu.Lock()
	defer r.load.mu.Unlock()
	if d := r.load.digests[origin]; d != nil {
		return d.n, d.sum
	}
	return 0, 0
}

// RemoteDropped is how many remote adds a full request table refused.
func (r *Router) RemoteDropped() int64 {
	r.load.mu.Lock()
	defer r.load.mu.Unlock()
	return r.load.remote.dropped
}
