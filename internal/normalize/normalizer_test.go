package normalize

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordHandler collects log records.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// TestMismatchWarningRateLimited: block size mismatches are all counted but
// logged at most once per interval, with the suppressed count.
func TestMismatchWarningRateLimited(t *testing.T) {
	h := &recordHandler{}
	n := New(Config{Logger: slog.New(h)})
	n.warnInterval = time.Hour
	var b Batch
	p := mustDesc(t, `[1.0, [["BlockStored", [1], nil, [seq(1, 24)], 24], ["BlockStored", [2], nil, [seq(1, 24)], 24]], 0]`)
	for range 3 {
		if err := n.Normalize(p, &b); err != nil {
			t.Fatal(err)
		}
		if b.Skipped[reasonBlockSizeMismatch] != 2 {
			t.Fatalf("skipped %v", b.Skipped)
		}
	}
	if len(h.recs) != 1 {
		t.Fatalf("%d warnings logged, want 1", len(h.recs))
	}
	if r := h.recs[0]; r.Level != slog.LevelWarn || !strings.Contains(r.Message, "block size") {
		t.Errorf("warning %v %q", r.Level, r.Message)
	}
	// Once the interval has passed, the next warning reports what was suppressed.
	n.warnLast[reasonBlockSizeMismatch] = time.Now().Add(-2 * time.Hour)
	if err := n.Normalize(p, &b); err != nil {
		t.Fatal(err)
	}
	if len(h.recs) != 2 {
		t.Fatalf("%d warnings logged, want 2", len(h.recs))
	}
	var suppressed int64 = -1
	h.recs[1].Attrs(func(a slog.Attr) bool {
		if a.Key == "suppressed" {
			suppressed = a.Value.Int64()
		}
		return true
	})
	if suppressed != 5 {
		t.Errorf("suppressed = %d, want 5", suppressed)
	}
}

// TestRejectedBatchLeavesState: a batch rejected whole (here truncated after a
// valid salted store) changes nothing in the Normalizer.
func TestRejectedBatchLeavesState(t *testing.T) {
	n := New(Config{})
	var b Batch
	good := mustDesc(t, `[1.0, [["BlockStored", [1], nil, [seq(1, 16)], 16, nil, "GPU", nil, [["salt"]]]], 0]`)
	bad := mustDesc(t, `[1.0, [["BlockStored", [2], nil, [seq(1, 16)], 32, nil, "GPU", nil, [["other"]]], ["BlockRemoved", [1]]], 0]`)
	bad = bad[:len(bad)-4]
	if err := n.Normalize(good, &b); err != nil {
		t.Fatal(err)
	}
	if err := n.Normalize(bad, &b); err == nil {
		t.Fatal("truncated batch accepted")
	}
	if len(b.Events) != 0 || b.DPRank != -1 {
		t.Fatalf("rejected batch left %d events", len(b.Events))
	}
	if n.namespacedBlocks() != 1 || n.engineBlockSize != 16 {
		t.Fatalf("state changed: %d namespaces, engine block size %d", n.namespacedBlocks(), n.engineBlockSize)
	}
	// A child of block 1 still inherits "salt".
	child := mustDesc(t, `[1.0, [["BlockStored", [3], 1, [seq(17, 16)], 16]], 0]`)
	if err := n.Normalize(child, &b); err != nil {
		t.Fatal(err)
	}
	if got, want := b.Events[0].Blocks[0].BlockHash, BlockHash(Seed("", "salt"), seqTokens(17, 16), nil); got != want {
		t.Errorf("child hash %#x, want %#x (inherited salt)", got, want)
	}
}

// TestNormalizeAllocs: after warm-up, decode+normalize of the benchmark mix
// allocates nothing.
func TestNormalizeAllocs(t *testing.T) {
	w := newBenchWorkload(16)
	n := New(Config{})
	var b Batch
	pass := func() {
		for _, p := range w.payloads {
			if err := n.Normalize(p, &b); err != nil {
				t.Fatal(err)
			}
		}
	}
	pass()
	allocs := testing.AllocsPerRun(5, pass)
	if allocs != 0 {
		t.Errorf("%.2f allocations per pass over %d events, want 0", allocs, w.events)
	}
}
