package ingest

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// budget is the bytes of received batches that may be queued across all
// ranks (Config.QueueBytes): a reader takes a message's bytes before it
// queues the message and the applier gives them back once the batch is
// handled. A reader that cannot take them waits, reading nothing meanwhile,
// so TCP back-pressures its publisher. Waiters are served in order, so a
// large message is not starved by small ones.
type budget struct {
	mu      sync.Mutex
	size    int64
	free    int64
	waiters []*budgetWaiter
	gauge   prometheus.Gauge // queued bytes (nil: none)
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed once the bytes are taken for the waiter
}

func newBudget(size int64, gauge prometheus.Gauge) *budget {
	return &budget{size: size, free: size, gauge: gauge}
}

// waitNoter is told when a take has to wait (before it blocks).
type waitNoter interface{ budgetWait() }

// take takes n bytes (at most the whole budget), waiting for them unless ctx
// ends first; w (if not nil) is told before it waits. It returns how many it
// took (0: ctx ended) and whether it had to wait. A nil budget has no bound
// (tests).
func (b *budget) take(ctx context.Context, n int64, w waitNoter) (took int64, waited bool) {
	if b == nil {
		return max(n, 1), false
	}
	n = max(min(n, b.size), 1)
	b.mu.Lock()
	if len(b.waiters) == 0 && b.free >= n {
		b.free -= n
		b.setGauge()
		b.mu.Unlock()
		return n, false
	}
	bw := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, bw)
	b.mu.Unlock()
	if w != nil {
		w.budgetWait()
	}
	select {
	case <-bw.ready:
		return n, true
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-bw.ready: // taken meanwhile: give it back
		b.free += n
	default:
		for i, o := range b.waiters {
			if o == bw {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	b.grant()
	return 0, true
}

// give returns n bytes taken with take.
func (b *budget) give(n int64) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.free += n
	b.grant()
	b.mu.Unlock()
}

// grant serves the waiters in order while the first fits; b.mu is held.
func (b *budget) grant() {
	for len(b.waiters) > 0 && b.waiters[0].n <= b.free {
		w := b.waiters[0]
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
		b.free -= w.n
		close(w.ready)
	}
	b.setGauge()
}

func (b *budget) setGauge() {
	if b.gauge != nil {
		b.gauge.Set(float64(b.size - b.free))
	}
}

// queued reports the bytes taken.
func (b *budget) queued() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size - b.free
}
