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
}

type request struct {
	id            string
	rank          *rank
	prefillBlocks int64
	prefillTokens int64
	decodeBlocks  int64
	prefillDone   bool
	expires       time.Time
	origin        string // the replica that routed it; "" this one (replica.go)
	prev, next    *request
}

// Load is one worker/rank's active load.
type Load struct {
	WorkerID string
	DPRank   uint32
	Active   int64

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
	for _, rk := range r.ranks {
		out = append(out, Load{WorkerID: rk.key.ID, DPRank: rk.key.DPRank, Active: rk.active,
			prefillBlocks: rk.prefillBlocks, prefillTokens: rk.prefillTokens, decodeBlocks: rk.decodeBlocks})
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
	return r.load.prefillDone(requestID)
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

func newLoadTable(max int) *loadTable {
	return &loadTable{requests: make(map[string]*request), max: max}
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
	if _, ok := t.requests[id]; ok {
		return fmt.Errorf("%w: request_id %q is already active", ErrAlreadyExists, id)
	}
	if err := t.roomLocked(); err != nil {
		return err
	}
	t.insertLocked(id, rk, prefillBlocks, prefillTokens, decodeBlocks, expires)
	return nil
}

// insertLocked adds a request and its prefill load. The caller holds t.mu.
func (t *loadTable) insertLocked(id string, rk *rank, prefillBlocks, prefillTokens, decodeBlocks int64, expires time.Time) {
	q := &request{id: id, rank: rk, prefillBlocks: prefillBlocks, prefillTokens: prefillTokens, decodeBlocks: decodeBlocks, expires: expires}
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
}

func (t *loadTable) prefillDone(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	q, ok := t.requests[id]
	if !ok {
		return fmt.Errorf("%w: request_id %q is not active (never routed, finished, or expired)", ErrNotFound, id)
	}
	q.markPrefillDone()
	return nil
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

func (t *loadTable) dropWorker(wk *worker) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, q := range t.requests {
		if q.rank.worker == wk {
			t.release(q)
		}
	}
}
