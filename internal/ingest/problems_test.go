package ingest

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/shamaton/msgpack/v2"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// TestProblems: a rank whose stores are refused says so in its status (by
// reason, with counts and a detail) and with a WARN line, not only in the
// counters: an engine block size the router cannot use, a parent the index
// does not hold, a batch that does not decode.
func TestProblems(t *testing.T) {
	store := func(hash uint64, parent any, bs int) []any {
		toks := make([]any, bs)
		for i := range toks {
			toks[i] = int(hash)*100 + i
		}
		return []any{"BlockStored", []any{hash}, parent, toks, bs}
	}
	batch := func(evs ...any) []byte {
		b, err := msgpack.Marshal([]any{1.0, evs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var logs bytes.Buffer
	w := kv.WorkerRank{ID: "w"}
	r := &rank{worker: "w", sink: newIndexSink(radix.New(radix.Config{}), w, testBlockSize, 0, slog.New(slog.DiscardHandler)),
		log: slog.New(slog.NewTextHandler(&logs, nil)), ctx: context.Background()}
	r.onConnect()
	r.onBatch(0, nil, batch(store(1, nil, testBlockSize+testBlockSize/2), store(2, nil, testBlockSize+testBlockSize/2)))
	r.onBatch(1, nil, batch(store(3, 99, testBlockSize)))
	r.onBatch(2, nil, []byte{0xc1})
	got := map[string]Problem{}
	for _, p := range r.status().Problems {
		got[p.Reason] = p
	}
	for reason, n := range map[string]uint64{"block_size_mismatch": 2, "parent_not_found": 1, "decode_error": 1} {
		if p := got[reason]; p.Count != n || p.Detail == "" {
			t.Errorf("problem %q: %+v, want count %d with a detail (all: %+v)", reason, p, n, r.status().Problems)
		}
	}
	for _, reason := range []string{"block_size_mismatch", "parent_not_found", "decode_error"} {
		if !strings.Contains(logs.String(), `level=WARN msg="kv events: refusing events" reason=`+reason) {
			t.Errorf("no WARN line for %s:\n%s", reason, logs.String())
		}
	}
}
