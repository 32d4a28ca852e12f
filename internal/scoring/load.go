package scoring

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// loadTable tracks routed requests by id. Requests also sit in a list in
// routing order, which (with one TTL for all) is expiry order, so expiry
// looks only at the requests that expire. The load a request puts on its
// rank is its model's (model.mu): a change to a request takes the table's
// lock, then its model's.
type loadTable struct {
	mu         sync.Mutex
	requests   map[string]*request
	head, tail *request // oldest, newest
	max        int      // requests at most (Config.MaxActiveRequests)
	remote     remoteState
	ttl        time.Duration
	// digests are the active requests by origin ("" this replica), kept as
	// requests come and go (LoadDigest).
	digests map[string]*digest

	// first is head, for expire's check without the lock (a request's
	// expiry never changes), and n is len(requests), for checkRoom's.
	first atomic.Pointer[request]
	n     atomic.Int64

	priorSPT float64 // the learner's prior seconds per token
}

// digest is a count of requests and the xor of their ids' hashes.
type digest struct {
	n   int
	sum uint64
}

type request struct {
	id            string
	rank          *rank
	prefillBlocks int64
	prefillTokens int64
	decodeBlocks  int64
	prefillDone   bool
	decodeAtRoute int64 // the rank's active decode blocks when routed
	routed        time.Time
	expires       time.Time
	origin        string // the replica that routed it; "" this one (replica.go)
	idHash        uint64 // xxhash of id, for its origin's digest
	prev, next    *request
}

// Load is one worker/rank's active load.
type Load struct {
	WorkerID string
	DPRank   uint32
	Active   int64
	// PrefillTokensPerSecond is the time policy's estimate of the rank's
	// prefill throughput at its current decode load (the prior until
	// MarkPrefillDone timings arrive).
	PrefillTokensPerSecond float64

	// The load's terms in the cost, for the package's tests.
	prefillBlocks int64
	prefillTokens int64
	decodeBlocks  int64
}

// Loads reports the active load of every registered worker/rank.
func (r *Router) Loads() []Load {
	r.load.expire(r.cfg.now())
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Load, 0, len(r.ranks))
	for _, ranks := range r.models {
		m := ranks[0].model
		m.mu.Lock()
		e := ratesOf(&m.fleet, r.load.priorSPT)
		for _, rk := range ranks {
			out = append(out, Load{WorkerID: rk.key.ID, DPRank: rk.key.DPRank, Active: rk.active,
				PrefillTokensPerSecond: 1 / e.secondsPerToken(&rk.timing, float64(rk.decodeBlocks)),
				prefillBlocks:          rk.prefillBlocks, prefillTokens: rk.prefillTokens, decodeBlocks: rk.decodeBlocks})
		}
		m.mu.Unlock()
	}
	return out
}

// MarkPrefillDone moves a request's load from prefill to decode.
func (r *Router) MarkPrefillDone(requestID string) error {
	if err := r.checkRequestID(requestID); err != nil {
		return err
	}
	if r.cfg.OnChange != nil {
		return r.markShared(ChangePrefillDone, requestID) // replica.go
	}
	return r.load.prefillDone(requestID, r.cfg.now())
}

// MarkFinished ends a request's load.
func (r *Router) MarkFinished(requestID string) error {
	if err := r.checkRequestID(requestID); err != nil {
		return err
	}
	if r.cfg.OnChange != nil {
		return r.markShared(ChangeFinished, requestID) // replica.go
	}
	return r.load.finish(requestID)
}

// ActiveRequests returns the number of routed requests not yet finished or
// expired.
func (r *Router) ActiveRequests() int {
	return int(r.load.n.Load())
}

// newLoadTable holds at most max requests, each expiring ttl after its
// Route; the learners start from priorTokensPerSecond.
func newLoadTable(max int, ttl time.Duration, priorTokensPerSecond float64) *loadTable {
	return &loadTable{requests: make(map[string]*request), max: max, ttl: ttl,
		digests: make(map[string]*digest), priorSPT: 1 / priorTokensPerSecond}
}

// checkRoom reports whether one more request fits, without the lock: add
// checks again under it.
func (t *loadTable) checkRoom() error {
	if n := t.n.Load(); n >= int64(t.max) {
		return t.full(int(n))
	}
	return nil
}

func (t *loadTable) roomLocked() error {
	if len(t.requests) >= t.max {
		return t.full(len(t.requests))
	}
	return nil
}

func (t *loadTable) full(n int) error {
	return limitError(LimitActiveRequests, ErrResourceExhausted, "%d routed requests are active, the limit (--max-active-requests); finish requests with MarkFinished", n)
}

func (t *loadTable) add(id string, rk *rank, prefillBlocks, prefillTokens, decodeBlocks int64, expires time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q, ok := t.requests[id]; ok {
		if q.origin == "" {
			return fmt.Errorf("%w: request_id %q is already active", ErrAlreadyExists, id)
		}
		// Another replica's: a gateway retrying here a Route that replica
		// made and did not answer (it failed in between). This Route
		// replaces it, and so does every replica it reaches (addRemote).
		t.release(q)
	}
	if err := t.roomLocked(); err != nil {
		return err
	}
	t.insertLocked(id, "", rk, prefillBlocks, prefillTokens, decodeBlocks, expires)
	return nil
}

// insertLocked adds a request of origin and its prefill load, routed one
// TTL before expires (for a request another replica routed and passed on in
// a state transfer, with its remaining TTL, that is about when it was
// routed there). The caller holds t.mu; it takes rk's model's.
func (t *loadTable) insertLocked(id, origin string, rk *rank, prefillBlocks, prefillTokens, decodeBlocks int64, expires time.Time) *request {
	q := &request{id: id, rank: rk, prefillBlocks: prefillBlocks, prefillTokens: prefillTokens, decodeBlocks: decodeBlocks,
		routed: expires.Add(-t.ttl), expires: expires, origin: origin, idHash: xxhash.Sum64String(id)}
	t.requests[id] = q
	t.n.Store(int64(len(t.requests)))
	q.prev = t.tail
	if t.tail != nil {
		t.tail.next = q
	} else {
		t.head = q
		t.first.Store(q)
	}
	t.tail = q
	d := t.digests[origin]
	if d == nil {
		d = new(digest)
		t.digests[origin] = d
	}
	d.n++
	d.sum ^= q.idHash
	m := rk.model
	m.mu.Lock()
	q.decodeAtRoute = rk.decodeBlocks
	rk.active++
	rk.prefillBlocks += prefillBlocks
	rk.prefillTokens += prefillTokens
	m.prefillStarted(q)
	m.mu.Unlock()
	return q
}

func (t *loadTable) prefillDone(id string, now time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	q, ok := t.requests[id]
	if !ok {
		return fmt.Errorf("%w: request_id %q is not active (never routed, finished, or expired)", ErrNotFound, id)
	}
	t.markPrefillDone(q, now, true)
	return nil
}

// markPrefillDone moves q's load from prefill to decode; with learn, the
// time policy learns from it (a mark made on another replica arrives here
// one sync lag late, which the learner takes as part of the prefill). A
// prefill-done carried by a state transfer, or one that overtook its add,
// says nothing about when the prefill ended: no learning. The caller holds
// t.mu; it takes q's model's.
func (t *loadTable) markPrefillDone(q *request, now time.Time, learn bool) {
	if q.prefillDone {
		return
	}
	q.prefillDone = true
	m := q.rank.model
	m.mu.Lock()
	q.rank.prefillBlocks -= q.prefillBlocks
	q.rank.prefillTokens -= q.prefillTokens
	q.rank.decodeBlocks += q.decodeBlocks
	m.prefillEnded(q, now, learn, t.priorSPT)
	m.mu.Unlock()
}

func (t *loadTable) finish(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	q, ok := t.requests[id]
	if !ok {
		return fmt.Errorf("%w: request_id %q is not active (never routed, finished, or expired)", ErrNotFound, id)
	}
	t.release(q)
	return nil
}

// release removes q and its load. The caller holds t.mu; it takes q's
// model's.
func (t *loadTable) release(q *request) {
	delete(t.requests, q.id)
	t.n.Store(int64(len(t.requests)))
	if q.prev != nil {
		q.prev.next = q.next
	} else {
		t.head = q.next
		t.first.Store(q.next)
	}
	if q.next != nil {
		q.next.prev = q.prev
	} else {
		t.tail = q.prev
	}
	q.prev, q.next = nil, nil
	if d := t.digests[q.origin]; d != nil {
		if d.n--; d.n == 0 {
			delete(t.digests, q.origin)
		} else {
			d.sum ^= q.idHash
		}
	}
	m := q.rank.model
	m.mu.Lock()
	q.rank.active--
	if q.prefillDone {
		q.rank.decodeBlocks -= q.decodeBlocks
	} else {
		q.rank.prefillBlocks -= q.prefillBlocks
		q.rank.prefillTokens -= q.prefillTokens
		m.prefillEnded(q, time.Time{}, false, t.priorSPT)
	}
	m.mu.Unlock()
}

// expire releases the requests past their TTL, oldest first. A clock that
// stepped back can leave a request behind a younger one; it then expires
// with that one. A Route calls it first: while the oldest request has not
// expired it takes no lock.
func (t *loadTable) expire(now time.Time) {
	if q := t.first.Load(); q == nil || !now.After(q.expires) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.head != nil && now.After(t.head.expires) {
		t.release(t.head)
	}
}

// dropWorker releases wk's requests.
func (t *loadTable) dropWorker(wk *worker) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, q := range t.requests {
		if q.rank.worker == wk {
			t.release(q)
		}
	}
}
