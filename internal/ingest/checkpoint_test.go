package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// applierRank returns a rank whose applier runs, fed through its queue (no
// connection), with room for one Checkpoint request in its pause channel so
// a test can see the request wait for the applier.
func applierRank(t *testing.T, s sink) *rank {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &rank{worker: "w", sink: s, ctx: ctx, cancel: cancel, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		q: make(chan item, 8), large: make(chan struct{}, largeSlots), pauses: make(chan *pause, 1)}
	r.wg.Add(1)
	go r.applyLoop()
	t.Cleanup(r.stop)
	return r
}

// holdSink is a recordSink whose next apply, once armed, closes entered and
// waits for release before it applies: a batch caught half-way.
type holdSink struct {
	recordSink
	mu               sync.Mutex
	entered, release chan struct{}
}

func (h *holdSink) arm() (entered, release chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entered, h.release = make(chan struct{}), make(chan struct{})
	return h.entered, h.release
}

func (h *holdSink) apply(p []byte, st *batchStats) error {
	h.mu.Lock()
	entered, release := h.entered, h.release
	h.entered, h.release = nil, nil
	h.mu.Unlock()
	if entered != nil {
		close(entered)
		<-release
	}
	return h.recordSink.apply(p, st)
}

// waitErr returns what c delivers, failing the test after waitFor.
func waitErr(t *testing.T, c <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(waitFor):
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
}

// rankCut is what a checkpoint's fn saw of a rank.
type rankCut struct {
	pos    Position
	ranks  []kv.WorkerRank
	trace  string // the sink's applies and clears at the cut
	queued int    // batches waiting in the queue at the end of fn
}

// TestCheckpointWaitsForTheBatch: a checkpoint asked for while a batch is
// being applied waits for the whole batch, and the applier applies nothing
// while fn runs, though a batch is waiting.
func TestCheckpointWaitsForTheBatch(t *testing.T) {
	hs := &holdSink{}
	r := applierRank(t, hs)
	entered, release := hs.arm()
	r.q <- item{seq: 0, payload: seqPayload(0)}
	<-entered

	var called atomic.Bool
	var cut rankCut
	errc := make(chan error, 1)
	go func() {
		errc <- r.checkpoint(func(w kv.WorkerRank, pos Position, ranks []kv.WorkerRank) error {
			called.Store(true)
			cut.pos, cut.ranks, cut.trace = pos, ranks, strings.Join(hs.trace, " ")
			r.q <- item{seq: 1, payload: seqPayload(1)}
			cut.queued = len(r.q)
			return nil
		})
	}()
	eventually(t, "the checkpoint to ask for a pause", func() bool { return len(r.pauses) == 1 })
	if called.Load() {
		t.Fatal("fn ran while a batch was being applied")
	}
	close(release)
	if err := waitErr(t, errc, "the checkpoint"); err != nil {
		t.Fatal(err)
	}
	want := Position{HasSeq: true, Seq: 0, Sum: xxhash.Sum64(seqPayload(0))}
	if cut.pos != want || cut.trace != "0" || cut.queued != 1 {
		t.Errorf("cut %+v, want position %+v, trace \"0\" and one batch waiting", cut, want)
	}
	if !slices.Equal(cut.ranks, []kv.WorkerRank{{ID: "w"}}) {
		t.Errorf("index ranks %v, want the rank's own", cut.ranks)
	}
	eventually(t, "the applier to go on", func() bool { return r.lastSeq.Load() == 1 })
}

// hookReplayer serves seqs 0..hi, calling before(seq) before each reply.
type hookReplayer struct {
	hi     uint64
	before func(seq uint64)
}

func (h *hookReplayer) replay(_ context.Context, start uint64, fn replyFunc) error {
	for seq := start; seq <= h.hi; seq++ {
		h.before(seq)
		if err := fn(seq, nil, seqPayload(seq)); err != nil {
			return err
		}
	}
	return nil
}

// TestCheckpointBetweenReplies: a long replay does not hold a checkpoint up:
// the applier pauses between two replies, and the cut has what the replay
// applied so far.
func TestCheckpointBetweenReplies(t *testing.T) {
	rec := &recordSink{}
	var cut rankCut
	errc := make(chan error, 1)
	r := &rank{worker: "w", sink: rec, seq: seqState{canReplay: true}, ctx: context.Background(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), pauses: make(chan *pause, 1)}
	r.replay = &hookReplayer{hi: 5, before: func(seq uint64) {
		if seq != 3 {
			return
		}
		go func() {
			errc <- r.checkpoint(func(_ kv.WorkerRank, pos Position, _ []kv.WorkerRank) error {
				cut.pos, cut.trace = pos, strings.Join(rec.trace, " ")
				return nil
			})
		}()
		eventually(t, "the checkpoint to ask for a pause", func() bool { return len(r.pauses) == 1 })
	}}
	r.onConnect() // the catch-up: replies 0..5, the checkpoint served after 3
	if err := waitErr(t, errc, "the checkpoint"); err != nil {
		t.Fatal(err)
	}
	if cut.pos.Seq != 3 || !cut.pos.HasSeq || cut.trace != "0 1 2 3" {
		t.Errorf("cut at %+v with trace %q, want seq 3 and \"0 1 2 3\"", cut.pos, cut.trace)
	}
	if got := strings.Join(rec.trace, " "); got != "0 1 2 3 4 5" {
		t.Errorf("trace %q after the replay", got)
	}
}

// checkpointSetup is a Manager following one Go publisher per worker.
func checkpointSetup(t *testing.T, ids ...string) (*Manager, map[string]*goPub) {
	t.Helper()
	m, _, _ := newTestManager(t, true)
	pubs := map[string]*goPub{}
	for _, id := range ids {
		p := newGoPub(t)
		if err := m.Add(Worker{ID: id, KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.port)}); err != nil {
			t.Fatal(err)
		}
		warmUp(t, m, id, func() uint64 { return p.publish(t, nil) })
		pubs[id] = p
	}
	return m, pubs
}

// TestCheckpointRemove: fn may remove the rank it was called for (its
// applier stops at once rather than waiting for Checkpoint) or one not
// visited yet (left out); a failing fn stops the checkpoint and the ranks
// go on applying.
func TestCheckpointRemove(t *testing.T) {
	m, pubs := checkpointSetup(t, "a", "b", "c", "d")
	var visited []string
	var errs []error
	err := m.Checkpoint(func(w kv.WorkerRank, _ Position, _ []kv.WorkerRank) error {
		visited = append(visited, w.ID)
		if w.ID == "a" {
			errs = append(errs, m.Remove("a"), m.Remove("b"))
		}
		if m.Status("d") == nil { // Status works from fn
			errs = append(errs, errors.New("no status for d"))
		}
		return nil
	})
	if err != nil || errors.Join(errs...) != nil {
		t.Fatalf("checkpoint: %v; in fn: %v", err, errors.Join(errs...))
	}
	if !slices.Equal(visited, []string{"a", "c", "d"}) {
		t.Errorf("visited %v, want [a c d]", visited)
	}

	boom := errors.New("boom")
	visited = nil
	err = m.Checkpoint(func(w kv.WorkerRank, _ Position, _ []kv.WorkerRank) error {
		visited = append(visited, w.ID)
		return boom
	})
	if !errors.Is(err, boom) || !slices.Equal(visited, []string{"c"}) {
		t.Errorf("checkpoint with a failing fn: %v after %v, want boom after [c]", err, visited)
	}
	for _, id := range []string{"c", "d"} {
		waitSeq(t, m, id, pubs[id].publish(t, nil))
	}
}

// TestCheckpointClose: fn may close the Manager; the checkpoint then fails
// (a cut without the ranks left would lose them), as one after Close does.
func TestCheckpointClose(t *testing.T) {
	m, _ := checkpointSetup(t, "a", "b")
	var closeErr error
	err := m.Checkpoint(func(w kv.WorkerRank, _ Position, _ []kv.WorkerRank) error {
		closeErr = m.Close()
		return nil
	})
	if closeErr != nil {
		t.Fatalf("Close in fn: %v", closeErr)
	}
	if err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("checkpoint closed under it: %v, want an error", err)
	}
	if err := m.Checkpoint(func(kv.WorkerRank, Position, []kv.WorkerRank) error { return nil }); err == nil {
		t.Error("checkpoint after Close: no error")
	}
}

// TestResumeRoundTrip: a resumed rank reports the position it was given
// until a batch decides the restore, so a checkpoint taken before then loses
// nothing. The worker's index ranks its batches named (above its DPSize)
// are rank 0's: reported with it, and cleared with it. Resume is asked once
// per worker: added again after Remove, it starts as new.
func TestResumeRoundTrip(t *testing.T) {
	id := "resumed"
	resumed := Position{HasSeq: true, Seq: 1000, Sum: 7, Epoch: "e"}
	idx := radix.New(radix.Config{CheckInvariants: true})
	m, _ := newTestManagerOn(t, idx, func(w kv.WorkerRank) (Position, bool) {
		return resumed, w == kv.WorkerRank{ID: id}
	})
	p := newGoPub(t)
	// The snapshot's blocks: the rank's own and those of dp rank 3, which
	// its batches named.
	pre := newIndexSink(idx, kv.WorkerRank{ID: id}, testBlockSize, 0, nil)
	e := newEngine(29)
	for _, dp := range []int{0, 3} {
		_, ev := e.store(nil, 2)
		var st batchStats
		if err := pre.apply(encodeBatch(t, []map[string]any{ev}, dp), &st); err != nil {
			t.Fatal(err)
		}
	}
	w := Worker{ID: id, KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.port)}
	if err := m.Add(w); err != nil {
		t.Fatal(err)
	}
	cut := checkpointRank(t, m)
	wantRanks := []kv.WorkerRank{{ID: id}, {ID: id, DPRank: 3}}
	if cut.pos != resumed || !slices.Equal(cut.ranks, wantRanks) {
		t.Errorf("checkpoint before any batch: %+v, want %+v on %v", cut, resumed, wantRanks)
	}
	if st := status(t, m, id); st.LastSeq != 1000 || st.Restore != "" || st.CachedBlocks != 2 {
		t.Errorf("status before any batch: %+v", st)
	}

	// The engine's seq is far below the restored one: cleared, both ranks.
	eventually(t, "a live batch to decide the restore", func() bool {
		p.publish(t, nil)
		return status(t, m, id).Restore != ""
	})
	if st := status(t, m, id); st.Restore != "cleared" {
		t.Errorf("Restore = %q, want cleared", st.Restore)
	}
	if got := idx.Workers(); len(got) != 0 {
		t.Errorf("index holds %v after the restore cleared the rank", got)
	}

	if err := m.Remove(id); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(w); err != nil {
		t.Fatal(err)
	}
	if cut := checkpointRank(t, m); cut.pos.HasSeq || len(cut.ranks) != 1 {
		t.Errorf("added again: checkpoint %+v, want a new rank", cut)
	}
}

// checkpointRank checkpoints m, which follows one rank, and returns its cut.
func checkpointRank(t *testing.T, m *Manager) rankCut {
	t.Helper()
	var cut rankCut
	n := 0
	if err := m.Checkpoint(func(_ kv.WorkerRank, pos Position, ranks []kv.WorkerRank) error {
		cut.pos, cut.ranks = pos, ranks
		n++
		return nil
	}); err != nil || n != 1 {
		t.Fatalf("checkpoint: %v after %d ranks, want 1", err, n)
	}
	return cut
}
