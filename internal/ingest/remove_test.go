package ingest

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// blockSink blocks applies while block is set, and counts the applies that
// reach the index.
type blockSink struct {
	sink
	mu      sync.Mutex
	block   chan struct{} // nil: pass
	entered chan struct{} // one signal per blocked apply (buffered)
	applied atomic.Int64
}

func (b *blockSink) setBlock(c chan struct{}) {
	b.mu.Lock()
	b.block = c
	b.mu.Unlock()
}

func (b *blockSink) apply(p []byte, st *batchStats) error {
	b.mu.Lock()
	c := b.block
	b.mu.Unlock()
	if c != nil {
		select {
		case b.entered <- struct{}{}:
		default:
		}
		<-c
	}
	b.applied.Add(1)
	return b.sink.apply(p, st)
}

// TestRemoveBlockedApplier: Remove of a worker whose applier is stuck inside
// an index write returns after StopTimeout without holding up Add, Status or
// Remove of other workers; the stuck write, once it ends, is the last one
// of the worker's to reach the index, and the index forgets the worker
// after it (before that, its ID cannot be added again).
func TestRemoveBlockedApplier(t *testing.T) {
	const stopTimeout = 1500 * time.Millisecond
	idx := radix.New(radix.Config{CheckInvariants: true})
	var stuck *blockSink
	m, _ := newTestManagerWith(t, idx, func(c *Config) {
		c.StopTimeout = stopTimeout
		c.newSink = func(w kv.WorkerRank) sink {
			s := newIndexSink(idx, w, testBlockSize, 0, nil)
			if w.ID != "stuck" || stuck != nil {
				return s
			}
			stuck = &blockSink{sink: s, entered: make(chan struct{}, 1)}
			return stuck
		}
	})
	add := func(id string) *goPub {
		t.Helper()
		p := newGoPub(t)
		if err := m.Add(Worker{ID: id, KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.port)}); err != nil {
			t.Fatal(err)
		}
		warmUp(t, m, id, func() uint64 { return p.publish(t, nil) })
		return p
	}
	p := add("stuck")
	add("other")
	e := newEngine(77)
	_, ev := e.store(nil, 3)
	waitSeq(t, m, "stuck", p.publish(t, []map[string]any{ev}))
	me := kv.WorkerRank{ID: "stuck"}
	if idx.Cached(me) != 3 {
		t.Fatalf("cached %d blocks, want 3", idx.Cached(me))
	}

	// Block the applier inside a write, with more batches queued behind it.
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	stuck.setBlock(release)
	_, ev = e.store(nil, 2)
	p.publish(t, []map[string]any{ev})
	select {
	case <-stuck.entered:
	case <-time.After(waitFor):
		t.Fatal("the applier never reached the blocked write")
	}
	stuck.setBlock(nil) // later applies would pass: only the gate refuses them
	m.mu.Lock()
	r := m.workers["stuck"].ranks[0]
	m.mu.Unlock()
	var last uint64
	for range 20 {
		_, ev = e.store(nil, 1)
		last = p.publish(t, []map[string]any{ev})
	}
	eventually(t, "batches queued behind the stuck write", func() bool { return len(r.q) > 0 })

	start := time.Now()
	removed := make(chan error, 1)
	go func() { removed <- m.Remove("stuck") }()
	eventually(t, "Remove to take the worker out", func() bool { return m.Status("stuck") == nil })

	// Remove is waiting for the stuck rank: the registry is not.
	t0 := time.Now()
	if st := m.Status("other"); len(st) != 1 {
		t.Errorf("status of another worker: %+v", st)
	}
	q := newGoPub(t)
	if err := m.Add(Worker{ID: "third", KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", q.port)}); err != nil {
		t.Error(err)
	}
	if err := m.Remove("third"); err != nil {
		t.Error(err)
	}
	if err := m.Add(Worker{ID: "stuck", KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", q.port)}); err == nil ||
		!strings.Contains(err.Error(), "still being removed") {
		t.Errorf("Add of a worker being removed: %v, want refused", err)
	}
	if d := time.Since(t0); d > stopTimeout/2 {
		t.Errorf("Status, Add and Remove of other workers took %v during a stuck Remove", d)
	}
	select {
	case err := <-removed:
		if d := time.Since(start); err == nil || d < stopTimeout || d > stopTimeout+time.Second {
			t.Errorf("Remove of a stuck worker: %v after %v, want a timeout after %v", err, d, stopTimeout)
		}
	case <-time.After(stopTimeout + waitFor):
		t.Fatal("Remove of a stuck worker did not return")
	}

	// The stuck write has not ended: the index keeps the worker until it has.
	if idx.Cached(me) != 3 {
		t.Errorf("cached %d blocks before the stuck write ended, want 3", idx.Cached(me))
	}
	before := stuck.applied.Load()
	unblock()
	r.wg.Wait() // the rank's goroutines are gone
	if n := stuck.applied.Load() - before; n != 1 {
		t.Errorf("%d writes reached the index after Remove, want the stuck one only (seq up to %d queued)", n, last)
	}
	if n := idx.Cached(me); n != 0 {
		t.Errorf("removed worker caches %d blocks", n)
	}
	for _, w := range idx.Workers() {
		if w.ID == "stuck" {
			t.Errorf("index still lists %v", w)
		}
	}
	// Its ID is free again, and the new registration's blocks stay.
	p2 := newGoPub(t)
	if err := m.Add(Worker{ID: "stuck", KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p2.port)}); err != nil {
		t.Fatal(err)
	}
	warmUp(t, m, "stuck", func() uint64 { return p2.publish(t, nil) })
	e2 := newEngine(78)
	_, ev = e2.store(nil, 4)
	waitSeq(t, m, "stuck", p2.publish(t, []map[string]any{ev}))
	checkTruth(t, idx, me, e2)
}
