package ingest

import (
	"io"
	"log/slog"
	"testing"

	"github.com/shamaton/msgpack/v2"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// TestSinkDPRank checks how the index sink uses the rank a batch names: a
// rank that differs from the endpoint's is trusted and counted, a rank no
// engine can have is an error that leaves the index alone (it would otherwise
// create phantom worker ranks, one per garbage value), and a reset clears
// every rank the sink wrote to.
func TestSinkDPRank(t *testing.T) {
	store := func(hash uint64) []any {
		toks := make([]any, testBlockSize)
		for i := range toks {
			toks[i] = int(hash)*100 + i
		}
		return []any{"BlockStored", []any{hash}, nil, toks, testBlockSize}
	}
	batch := func(dp any, hash uint64) []byte {
		b, err := msgpack.Marshal([]any{1.0, []any{store(hash)}, dp})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	w := kv.WorkerRank{ID: "w", DPRank: 1}
	for _, tc := range []struct {
		name     string
		dp       any
		wantErr  bool
		wantRank uint32 // where the block lands when !wantErr
		mismatch bool
	}{
		{name: "absent", dp: nil, wantRank: 1},
		{name: "same", dp: 1, wantRank: 1},
		{name: "other rank trusted", dp: 3, wantRank: 3, mismatch: true},
		{name: "largest rank", dp: kv.MaxDPSize - 1, wantRank: kv.MaxDPSize - 1, mismatch: true},
		{name: "rank out of range", dp: kv.MaxDPSize, wantErr: true},
		{name: "garbage rank", dp: 1<<31 - 1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := radix.New(radix.Config{CheckInvariants: true})
			s := newIndexSink(idx, w, testBlockSize, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
			var st batchStats
			st.reset()
			err := s.apply(batch(tc.dp, 7), &st)
			if (err != nil) != tc.wantErr {
				t.Fatalf("apply: err = %v, want error %v", err, tc.wantErr)
			}
			if st.dpMismatch != tc.mismatch {
				t.Errorf("dp mismatch = %v, want %v", st.dpMismatch, tc.mismatch)
			}
			got := idx.Workers()
			if tc.wantErr {
				if len(got) != 0 {
					t.Fatalf("index holds %v after a rejected batch", got)
				}
				return
			}
			if len(got) != 1 || got[0] != (kv.WorkerRank{ID: "w", DPRank: tc.wantRank}) {
				t.Fatalf("index holds %v, want worker w rank %d", got, tc.wantRank)
			}
			s.reset()
			if got := idx.Workers(); len(got) != 0 {
				t.Fatalf("index holds %v after reset", got)
			}
		})
	}
}

// TestSinkParentZero: a store whose parent hash is 0 (llm-d's publishers'
// "no parent" in the positional-array format) starts a chain at the root
// when the rank holds no block whose engine hash is 0, and hangs under that
// block when it does.
func TestSinkParentZero(t *testing.T) {
	store := func(hash uint64, parent any, base int) []any {
		toks := make([]any, testBlockSize)
		for i := range toks {
			toks[i] = base + i
		}
		return []any{"BlockStored", []any{hash}, parent, toks, testBlockSize}
	}
	batch := func(evs ...any) []byte {
		b, err := msgpack.Marshal([]any{1.0, evs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	w := kv.WorkerRank{ID: "w"}
	idx := radix.New(radix.Config{CheckInvariants: true})
	s := newIndexSink(idx, w, testBlockSize, 0, slog.New(slog.DiscardHandler))
	var st batchStats
	if err := s.apply(batch(store(11, 0, 100), store(12, 11, 200)), &st); err != nil {
		t.Fatal(err)
	}
	if st.applyErrors[applyParentNotFound] != 0 || st.parentZero != 1 || idx.Cached(w) != 2 {
		t.Fatalf("parent 0 with no block 0: %d parent-not-found, %d parent-zero, %d cached; want 0, 1, 2",
			st.applyErrors[applyParentNotFound], st.parentZero, idx.Cached(w))
	}
	// A rank that holds engine hash 0: parent 0 is that block.
	st.reset()
	if err := s.apply(batch(store(0, nil, 300), store(13, 0, 400)), &st); err != nil {
		t.Fatal(err)
	}
	if st.parentZero != 0 || idx.Cached(w) != 4 {
		t.Fatalf("parent 0 with block 0 held: %d parent-zero, %d cached; want 0, 4", st.parentZero, idx.Cached(w))
	}
	for _, base := range [][2]uint32{{100, 200}, {300, 400}} {
		var toks []uint32
		for _, b := range base {
			for i := range uint32(testBlockSize) {
				toks = append(toks, b+i)
			}
		}
		sc := idx.Match(normalize.HashPrompt(normalize.Seed("", ""), toks, testBlockSize, nil, nil), nil)
		if len(sc) != 1 || sc[0].Matched != 2 {
			t.Errorf("prompt from %v: scores %+v, want w matching both blocks", base, sc)
		}
	}
}

// TestSinkSGLangPageSize1: SGLang's default page size 1, every token its own
// BlockStored chained by parent hash, lands in the index as router blocks
// (whole ones only) that prompts match, with nothing refused.
func TestSinkSGLangPageSize1(t *testing.T) {
	const tokens = 3*testBlockSize + 5 // three router blocks and a tail
	var evs []any
	for i := range tokens {
		var parent any
		if i > 0 {
			parent = int64(1000 + i - 1)
		}
		evs = append(evs, []any{"BlockStored", []any{int64(1000 + i)}, parent, []any{7000 + i}, 1, nil, "GPU", nil})
	}
	payload, err := msgpack.Marshal([]any{1.0, evs, 0})
	if err != nil {
		t.Fatal(err)
	}
	w := kv.WorkerRank{ID: "w"}
	idx := radix.New(radix.Config{CheckInvariants: true})
	s := newIndexSink(idx, w, testBlockSize, 0, slog.New(slog.DiscardHandler))
	var st batchStats
	if err := s.apply(payload, &st); err != nil {
		t.Fatal(err)
	}
	for r, n := range st.filtered {
		if n > 0 {
			t.Errorf("%d events filtered for %v", n, normalize.Reason(r))
		}
	}
	if idx.Cached(w) != 3 || st.applyErrors != [numApplyErrors]uint32{} {
		t.Fatalf("cached %d (want 3), apply errors %v", idx.Cached(w), st.applyErrors)
	}
	var toks []uint32
	for i := range tokens {
		toks = append(toks, uint32(7000+i))
	}
	sc := idx.Match(normalize.HashPrompt(normalize.Seed("", ""), toks, testBlockSize, nil, nil), nil)
	if len(sc) != 1 || sc[0].Matched != 3 {
		t.Fatalf("scores %+v, want w matching 3 blocks", sc)
	}
}
