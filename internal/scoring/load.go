package scoring

import (
	"fmt"
	"sync"
	"time"
)

// loadTable tracks routed requests and the active load they put on ranks.
type loadTable struct {
	mu        sync.Mutex
	requests  map[string]*request
	nextSweep time.Time
}

type request struct {
	rank          *rank
	prefillBlocks int64
	prefillTokens int64
	decodeBlocks  int64
	prefillDone   bool
	expires       time.Time
}

func newLoadTable() *loadTable {
	return &loadTable{requests: make(map[string]*request)}
}

func (t *loadTable) add(id string, rk *rank, prefillBlocks, prefillTokens, decodeBlocks int64, expires time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.requests[id]; ok {
		return fmt.Errorf("%w: request_id %q is already active", ErrAlreadyExists, id)
	}
	t.requests[id] = &request{rank: rk, prefillBlocks: prefillBlocks, prefillTokens: prefillTokens, decodeBlocks: decodeBlocks, expires: expires}
	rk.active++
	rk.prefillBlocks += prefillBlocks
	rk.prefillTokens += prefillTokens
	return nil
}

func (t *loadTable) prefillDone(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	q, ok := t.requests[id]
	if !ok {
		return fmt.Errorf("%w: request_id %q is not active (never routed, finished, or expired)", ErrNotFound, id)
	}
	if !q.prefillDone {
		q.prefillDone = true
		q.rank.prefillBlocks -= q.prefillBlocks
		q.rank.prefillTokens -= q.prefillTokens
		q.rank.decodeBlocks += q.decodeBlocks
	}
	return nil
}

func (t *loadTable) finish(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	q, ok := t.requests[id]
	if !ok {
		return fmt.Errorf("%w: request_id %q is not active (never routed, finished, or expired)", ErrNotFound, id)
	}
	t.release(id, q)
	return nil
}

// release removes q's load. The caller holds t.mu.
func (t *loadTable) release(id string, q *request) {
	delete(t.requests, id)
	q.rank.active--
	if q.prefillDone {
		q.rank.decodeBlocks -= q.decodeBlocks
	} else {
		q.rank.prefillBlocks -= q.prefillBlocks
		q.rank.prefillTokens -= q.prefillTokens
	}
}

// expire releases requests past their TTL; it scans at most once a second.
func (t *loadTable) expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.nextSweep) {
		return
	}
	t.nextSweep = now.Add(time.Second)
	for id, q := range t.requests {
		if now.After(q.expires) {
			t.release(id, q)
		}
	}
}

func (t *loadTable) dropWorker(wk *worker) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, q := range t.requests {
		if q.rank.worker == wk {
			t.release(id, q)
		}
	}
}
