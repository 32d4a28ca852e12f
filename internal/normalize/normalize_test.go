package normalize

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
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

func mustDesc(t *testing.T, s string) []byte {
	t.Helper()
	p, err := encodeDesc(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

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
// allocates at most once per event (the target; it is zero today).
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
	if perEvent := allocs / float64(w.events); perEvent > 1 {
		t.Errorf("%.2f allocations per event, want <= 1", perEvent)
	}
}

// TestBatchReuse: normalizing into a Batch reuses its memory without
// corrupting the events of the current batch.
func TestBatchReuse(t *testing.T) {
	n := New(Config{})
	var b Batch
	big := mustDesc(t, `[1.0, [["BlockStored", [1, 2, 3, 4], nil, [seq(1, 64)], 16], ["BlockRemoved", [9, 8]]], 0]`)
	small := mustDesc(t, `[2.0, [["BlockStored", [5], nil, [seq(1, 16)], 16]], 0]`)
	for _, p := range [][]byte{big, small, big} {
		if err := n.Normalize(p, &b); err != nil {
			t.Fatal(err)
		}
	}
	if len(b.Events) != 2 || len(b.Events[0].Blocks) != 4 || b.Events[0].Blocks[3].EngineHash != 4 ||
		b.Events[1].EngineHashes[1] != 8 || b.TS != 1.0 {
		t.Fatalf("reused batch: %+v", b.Events)
	}
	if b.Events[0].Blocks[0].BlockHash != BlockHash(Seed("", ""), seqTokens(1, 16), nil) {
		t.Error("block hash")
	}
}

func TestReasonLabels(t *testing.T) {
	seen := map[string]bool{}
	for r := Reason(0); r < NumReasons; r++ {
		s := r.String()
		if s == "" || strings.Contains(s, "Reason(") || seen[s] {
			t.Errorf("reason %d label %q", r, s)
		}
		seen[s] = true
	}
}

func TestTierOf(t *testing.T) {
	for m, want := range map[string]kv.Tier{
		"": kv.TierDevice, "GPU": kv.TierDevice, "DEVICE": kv.TierDevice, "gpu": kv.TierDevice,
		"CPU": kv.TierHost, "CPU_PINNED": kv.TierHost, "CPU_TIER1": kv.TierHost,
		"CPU_TIER2": kv.TierDisk, "DISK": kv.TierDisk, "NVME": kv.TierDisk, "STORAGE": kv.TierDisk,
		"EXTERNAL": kv.TierExternal, "NETWORK": kv.TierExternal, "REMOTE": kv.TierExternal, "SHARED": kv.TierExternal,
		"TAPE": kv.TierDevice,
	} {
		if got := tierOf([]byte(m)); got != want {
			t.Errorf("tierOf(%q) = %d, want %d", m, got, want)
		}
	}
}

// TestDecodeErrorsName: every batch-level error says where.
func TestDecodeErrorsName(t *testing.T) {
	var rb rawBatch
	err := decodeBatch(mustDesc(t, `[1.0, [["BlockStored", [1]]], 0]`)[:10], &rb)
	if err == nil || !strings.Contains(err.Error(), "at byte") {
		t.Fatalf("error %v does not name an offset", err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte("decode batch")) {
		t.Errorf("error %v", err)
	}
}

// TestSplitExpansionBounded: an engine block size that is a huge multiple of
// the router's turns every hash of a tier-only store or a remove into that
// many router hashes; a few bytes of payload must not become gigabytes. An
// expansion beyond maxExpandedHashes per batch skips the event as malformed.
func TestSplitExpansionBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload string
		want    Kind // the last event's kind when accepted; 0: skipped as malformed
		hashes  int  // its engine hashes when accepted
	}{
		{name: "tier-only store, realistic split",
			payload: `[1.0, [{"type": "BlockStored", "block_hashes": [1, 2], "token_ids": [], "block_size": 64, "medium": "CPU"}], 0]`,
			want:    KindStoreTier, hashes: 8},
		{name: "tier-only store, huge block size",
			payload: `[1.0, [{"type": "BlockStored", "block_hashes": [1], "token_ids": [], "block_size": 33554432, "medium": "CPU"}], 0]`},
		{name: "remove after learning a huge block size",
			payload: `[1.0, [["BlockStored", [1], nil, [seq(1, 65536)], 65536], ["BlockRemoved", [seq(2, 300)]]], 0]`},
		{name: "remove after learning a realistic block size",
			payload: `[1.0, [["BlockStored", [1], nil, [seq(1, 64)], 64], ["BlockRemoved", [seq(2, 300)]]], 0]`,
			want:    KindRemove, hashes: 1200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := New(Config{})
			var b Batch
			if err := n.Normalize(mustDesc(t, tc.payload), &b); err != nil {
				t.Fatal(err)
			}
			if tc.want == 0 {
				if b.Skipped[reasonMalformedEvent] != 1 || len(b.Errors) != 1 {
					t.Fatalf("skipped %v, errors %v: want the expansion skipped as malformed", b.Skipped, b.Errors)
				}
				if !strings.Contains(b.Errors[0].Error(), "router blocks") {
					t.Errorf("error %q does not say why", b.Errors[0])
				}
				for _, ev := range b.Events {
					if ev.Kind == KindStoreTier || ev.Kind == KindRemove {
						t.Fatalf("expansion emitted: %d hashes", len(ev.EngineHashes))
					}
				}
				return
			}
			ev := b.Events[len(b.Events)-1]
			if ev.Kind != tc.want || len(ev.EngineHashes) != tc.hashes || len(b.Errors) != 0 {
				t.Fatalf("event %v with %d hashes, errors %v; want %v with %d", ev.Kind, len(ev.EngineHashes), b.Errors, tc.want, tc.hashes)
			}
		})
	}
}
