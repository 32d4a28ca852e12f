package ingest

import (
	"errors"
	"sync"
)

// Why a removed worker's blocks cannot come back.
//
// Every index write a rank makes goes through its sink's apply and reset
// (the applier is the only goroutine that calls them; readers never touch
// the index). Each rank's sink is wrapped in a gatedSink sharing one
// writeGate per worker, and each apply or reset runs only inside
// gate.enter/leave. Remove (and Close) close the gate. Under the gate's
// mutex:
//
//   - enter succeeds only while the gate is open, and counts the write
//     (active++) before it starts;
//   - close sets closed, then runs the retirement (Index.RemoveWorker) at
//     once if no write is active, else leaves it to the leave that brings
//     active to zero.
//
// So a write either entered before close, and the retirement runs after it
// has left (it happens-before RemoveWorker), or it enters after close and
// is refused without touching the index. No write of the worker's ranks
// follows RemoveWorker, whether or not the rank's goroutines stopped within
// StopTimeout: a stuck applier that wakes up later finds the gate closed.
// The Manager keeps the worker ID as retiring until RemoveWorker has run, and
// Add refuses that ID meanwhile, so the deferred RemoveWorker can never
// remove a later registration's blocks.

// errGateClosed: the worker was removed; the write was refused.
var errGateClosed = errors.New("worker removed")

// writeGate admits a worker's index writes until it is closed.
type writeGate struct {
	mu     sync.Mutex
	closed bool
	active int    // writes admitted and not yet left
	retire func() // run once, by close or the last leave after it
}

// enter admits one write; false once the gate is closed.
func (g *writeGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.active++
	return true
}

// leave ends a write admitted by enter; the last one after close retires.
func (g *writeGate) leave() {
	g.mu.Lock()
	g.active--
	var f func()
	if g.closed && g.active == 0 {
		f, g.retire = g.retire, nil
	}
	g.mu.Unlock()
	if f != nil {
		f()
	}
}

// close refuses every later write and runs retire (nil: nothing) once no
// admitted write is left: now, or when the last one leaves. It reports
// whether retire ran now.
func (g *writeGate) close(retire func()) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.closed = true
	if g.active > 0 {
		g.retire = retire
		g.mu.Unlock()
		return false
	}
	g.mu.Unlock()
	if retire != nil {
		retire()
	}
	return true
}

// gatedSink passes a rank's index writes through its worker's gate.
type gatedSink struct {
	sink
	gate *writeGate
}

func (s *gatedSink) apply(payload []byte, st *batchStats) error {
	if !s.gate.enter() {
		return errGateClosed
	}
	defer s.gate.leave()
	return s.sink.apply(payload, st)
}

func (s *gatedSink) reset() {
	if !s.gate.enter() {
		return
	}
	defer s.gate.leave()
	s.sink.reset()
}

func (s *gatedSink) track(on bool) {
	if b, ok := s.sink.(bounder); ok {
		b.track(on)
	}
}

func (s *gatedSink) trim(limit uint64) uint64 {
	b, ok := s.sink.(bounder)
	if !ok || !s.gate.enter() {
		return 0
	}
	defer s.gate.leave()
	return b.trim(limit)
}
