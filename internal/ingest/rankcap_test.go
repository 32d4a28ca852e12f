package ingest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/shamaton/msgpack/v2"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// TestInexactUntilCleared: a rank that lost a batch keeps its blocks and is
// inexact since the lost seq, learns its capacity while exact, and becomes
// exact again when the engine clears its cache (AllBlocksCleared).
func TestInexactUntilCleared(t *testing.T) {
	batch := func(evs ...any) []byte {
		b, err := msgpack.Marshal([]any{1.0, evs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	store := func(hash uint64) []any {
		toks := make([]any, testBlockSize)
		for i := range toks {
			toks[i] = int(hash)*100 + i
		}
		return []any{"BlockStored", []any{hash}, nil, toks, testBlockSize}
	}
	idx := radix.New(radix.Config{CheckInvariants: true})
	w := kv.WorkerRank{ID: "w"}
	r := &rank{worker: "w", sink: newIndexSink(idx, w, testBlockSize, 0, slog.New(slog.DiscardHandler)),
		log: slog.New(slog.DiscardHandler), ctx: context.Background()}
	r.onConnect()
	r.onBatch(0, nil, batch(store(1), store(2)))
	r.onBatch(1, nil, batch(store(3)))
	r.onBatch(4, nil, batch(store(4))) // 2 and 3 are lost
	st := r.status()
	if !st.Inexact || st.InexactSinceSeq != 2 || st.CachedBlocks != 4 || st.CapacityBlocks != 3 {
		t.Fatalf("after a gap: %+v; want inexact since 2, the 4 blocks kept, capacity 3 (learned)", st)
	}
	r.onBatch(5, nil, batch([]any{"AllBlocksCleared"}, store(5)))
	if st := r.status(); st.Inexact || st.InexactSinceSeq != 0 || st.CachedBlocks != 1 {
		t.Fatalf("after AllBlocksCleared: %+v; want exact, holding the 1 block stored after", st)
	}
}
