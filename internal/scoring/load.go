package scoring

import (
	"fmt"
	"sync"
	"time"
)

// loadTable tracks routed requests and the active load they put on ranks.
// Requests also sit in a list in routing order, which (with one TTL for all)
// is expiry order, so expiry looks only at the requests that expire.
type loadTable struct {
	mu         sync.Mutex
	requests   map[string]*request
	head, tail *request // oldest, newest
	max        int      // requests at most (Config.MaxActiveRequests)
	remote     remoteState
	ttl        time.Duration
	fleets     map[string]*fleetTiming // by model: PolicyTime's learner
	priorSPT   float64                 // its prior seconds per token
	// pending is, by model, the sum of rankTiming.pending over the ranks on
	// the model's list (a model without any is absent), kept as it changes
	// so a Route does not sum it over every rank (pending.go).
	pending map[string]int64
	// gen is the learner's generation: it changes whenever a learned
	// estimate may have (a sample, a fleet created or dropped, a fleet's
	// rank count), so values computed from the estimates at one generation
	// can be kept until the next (sptMemo). It starts at 1; 0 means none.
	gen uint64
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
	r.load.mu.Lock()
	defer r.load.mu.Unlock()
	out := make([]Load, 0, len(r.ranks))
	est := map[string]rates{}
	for _, rk := range r.ranks {
		e, ok := est[rk.worker.Model]
		if !ok {
			e = ratesOf(r.load.fleets[rk.worker.Model], r.load.priorSPT)
			est[rk.worker.Model] = e
		}
		out = append(out, Load{WorkerID: rk.key.ID, DPRank: rk.key.DPRank, Active: rk.active,
			PrefillTokensPerSecond: 1 / e.secondsPerToken(&rk.timing, float64(rk.decodeBlocks)),
			prefillBlocks:          rk.prefillBlocks, prefillTokens: rk.prefillTokens, decodeBlocks: rk.decodeBlocks})
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
	r.load.mu.Lock()
	defer r.load.mu.Unlock()
	return len(r.load.requests)
}

// newLoadTable holds at most max requests, each expiring ttl after its
// Route; its learner starts from priorTokensPerSecond.
func newLoadTable(max int, ttl time.Duration, priorTokensPerSecond float64) *loadTable {
	return &loadTable{requests: make(map[string]*request), max: max, ttl: ttl,
		fleets: make(map[string]*fleetTiming), priorSPT: 1 / priorTokensPerSecond, pending: make(map[string]int64), gen: 1}
}

// checkRoom reports whether one more request fits.
func (t *loadTable) checkRoom() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.roomLocked()
}

func (t *loadTable) roomLocked() error {
	if len(t.requests) >= t.max {
		return limitError(LimitActiveRequests, ErrResourceExhausted, "%d routed requests are active, the limit (--max-active-requests); finish requests with MarkFinished", len(t.requests))
	}
	return nil
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
	t.insertLocked(id, rk, prefillBlocks, prefillTokens, decodeBlocks, expires)
	return nil
}

// insertLocked adds a request and its prefill load, routed one TTL before
// expires (for a request another replica routed and passed on in a state
// transfer, with its remaining TTL, that is about when it was routed there).
// The caller holds t.mu.
func (t *loadTable) insertLocked(id string, rk *rank, prefillBlocks, prefillTokens, decodeBlocks int64, expires time.Time) {
	q := &request{id: id, rank: rk, prefillBlocks: prefillBlocks, prefillTokens: prefillTokens, decodeBlocks: decodeBlocks,
		decodeAtRoute: rk.decodeBlocks, routed: expires.Add(-t.ttl), expires: expires}
	t.requests[id] = q
	q.prev = t.tail
	if t.tail != nil {
		t.tail.next = q
	} else {
		t.head = q
	}
	t.tail = q
	rk.active++
	rk.prefillBlocks += prefillBlocks
	rk.prefillTokens += prefillTokens
	t.prefillStarted(q)
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
// t.mu.
func (t *loadTable) markPrefillDone(q *request, now time.Time, learn bool) {
	if q.prefillDone {
		return
	}
	q.prefillDone = true
	q.rank.prefillBlocks -= q.prefillBlocks
	q.rank.prefillTokens -= q.prefillTokens
	q.rank.decodeBlocks += q.decodeBlocks
	t.prefillEnded(q, now, learn)
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

// release removes q and its load. The caller holds t.mu.
func (t *loadTable) release(q *request) {
	delete(t.requests, q.id)
	if q.prev != nil {
		q.prev.next = q.next
	} else {
		t.head = q.next
	}
	if q.next != nil {
		q.next.prev = q.prev
	} else {
		t.tail = q.prev
	}
	q.prev, q.next = nil, nil
	q.rank.active--
	if q.prefillDone {
		q.rank.decodeBlocks -= q.decodeBlocks
	} else {
		q.rank.prefillBlocks -= q.prefillBlocks
		q.rank.prefillTokens -= q.prefillTokens
		t.prefillEnded(q, time.Time{}, false)
	}
}

// expire releases the requests past their TTL, oldest first. A clock that
// stepped back can leave a request behind a younger one; it then expires
// with that one.
func (t *loadTable) expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.head != nil && now.After(t.head.expires) {
		t.release(t.head)
	}
}

// dropWorker releases wk's requests and, when wk was its model's last
// worker, the model's learned timings.
func (t *loadTable) dropWorker(wk *worker, lastOfModel bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if lastOfModel {
		delete(t.fleets, wk.Model)
		t.gen++
	}
	for _, q := range t.requests {
		if q.rank.worker == wk {
			t.release(q)
		}
	}
}
