package persist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/state"
)

// fakeIngest is a Checkpointer over a fixed set of ranks: each ingest rank
// writes to itself; rank 1 of worker "b" also to rank 7 (a batch that named
// another dp rank), and worker "a" also to b/1, a rank of its own, whose
// position must still be kept.
type fakeIngest struct {
	pos map[kv.WorkerRank]ingest.Position
}

func (f *fakeIngest) Checkpoint(fn func(kv.WorkerRank, ingest.Position, []kv.WorkerRank) error) error {
	keys := make([]kv.WorkerRank, 0, len(f.pos))
	for k := range f.pos {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b kv.WorkerRank) int {
		if a.ID != b.ID {
			return map[bool]int{true: -1, false: 1}[a.ID < b.ID]
		}
		return int(a.DPRank) - int(b.DPRank)
	})
	for _, k := range keys {
		ranks := []kv.WorkerRank{k}
		switch k {
		case kv.WorkerRank{ID: "b", DPRank: 1}:
			ranks = append(ranks, kv.WorkerRank{ID: "b", DPRank: 7})
		case kv.WorkerRank{ID: "a"}:
			ranks = append(ranks, kv.WorkerRank{ID: "b", DPRank: 1})
		}
		if err := fn(k, f.pos[k], ranks); err != nil {
			return err
		}
	}
	return nil
}

var testIndex = radix.Config{Shards: 4, SegmentBlocks: 2, CheckInvariants: true}

// fill stores runs that share prefixes across ranks, on several tiers.
func fill(t *testing.T, ix *radix.Index, ranks []kv.WorkerRank) {
	t.Helper()
	for i, w := range ranks {
		var blocks []kv.Block
		for j := range 6 + i {
			bh := uint64(1000 + j) // shared prefix
			if j >= 4 {
				bh = uint64(i*100 + j)
			}
			blocks = append(blocks, kv.Block{EngineHash: uint64(i<<20 | j + 1), BlockHash: bh})
		}
		if err := ix.Store(w, 0, false, kv.TierDevice, blocks); err != nil {
			t.Fatal(err)
		}
		if err := ix.StoreTier(w, []uint64{blocks[0].EngineHash}, kv.TierHost); err != nil {
			t.Fatal(err)
		}
	}
}

func prompts() [][]uint64 {
	var out [][]uint64
	for i := range 4 {
		p := []uint64{1000, 1001, 1002, 1003}
		for j := 4; j < 6+i; j++ {
			p = append(p, uint64(i*100+j))
		}
		out = append(out, p)
	}
	return out
}

// sameIndex checks that b answers every prompt and every rank's size as a does.
func sameIndex(t *testing.T, a, b *radix.Index, ranks []kv.WorkerRank) {
	t.Helper()
	if !slices.Equal(a.Workers(), b.Workers()) {
		t.Fatalf("workers %v, want %v", b.Workers(), a.Workers())
	}
	for _, w := range ranks {
		if a.Cached(w) != b.Cached(w) {
			t.Fatalf("%s caches %d, want %d", w, b.Cached(w), a.Cached(w))
		}
	}
	name := func(ix *radix.Index, s []radix.Score) []string {
		var out []string
		for _, sc := range s {
			w, _ := ix.WorkerOf(sc.Slot)
			out = append(out, fmt.Sprintf("%s:%d:%v", w, sc.Matched, sc.ByTier))
		}
		slices.Sort(out)
		return out
	}
	for _, p := range prompts() {
		ga, gb := name(a, a.Match(p, nil)), name(b, b.Match(p, nil))
		if !slices.Equal(ga, gb) {
			t.Fatalf("match %v: %v, want %v", p, gb, ga)
		}
	}
}

func open(t testing.TB, dir string, reg prometheus.Registerer) *Store {
	t.Helper()
	st, err := Open(Config{Dir: dir, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// snapshotFixture is an index of four ranks, b/7 written to by b/1's
// batches, and the ingest positions of three.
func snapshotFixture(t *testing.T) ([]kv.WorkerRank, *radix.Index, *fakeIngest) {
	ranks := []kv.WorkerRank{{ID: "a"}, {ID: "b"}, {ID: "b", DPRank: 1}, {ID: "b", DPRank: 7}}
	ix := radix.New(testIndex)
	fill(t, ix, ranks)
	cp := &fakeIngest{pos: map[kv.WorkerRank]ingest.Position{
		{ID: "a"}:            {HasSeq: true, Seq: 41, Sum: 0xfeed, Epoch: "e1"},
		{ID: "b"}:            {},
		{ID: "b", DPRank: 1}: {HasSeq: true, Seq: 7, Sum: 9},
	}}
	return ranks, ix, cp
}

func TestSnapshotRestore(t *testing.T) {
	dir := t.TempDir()
	ranks, ix, cp := snapshotFixture(t)
	reg := prometheus.NewRegistry()
	st := open(t, dir, reg)
	info, err := st.Snapshot(ix, cp)
	if err != nil {
		t.Fatal(err)
	}
	if info.Counts.Ranks != 4 {
		t.Fatalf("snapshot of %d ranks, want 4 (b/7 written with b/1)", info.Counts.Ranks)
	}
	if got := testutil.ToFloat64(st.metrics.writes.WithLabelValues("ok")); got != 1 {
		t.Fatalf("writes ok = %v", got)
	}
	st.Close()

	st = open(t, dir, nil)
	defer st.Close()
	res, err := st.Restore(testIndex)
	if err != nil {
		t.Fatal(err)
	}
	if res.Snapshot.Path != info.Path {
		t.Fatalf("restored %q, want %q", res.Snapshot.Path, info.Path)
	}
	sameIndex(t, ix, res.Index, ranks)
	want := map[kv.WorkerRank]ingest.Position{
		{ID: "a"}:            {HasSeq: true, Seq: 41, Sum: 0xfeed, Epoch: "e1"},
		{ID: "b", DPRank: 1}: {HasSeq: true, Seq: 7, Sum: 9},
	}
	if len(res.Positions) != len(want) {
		t.Fatalf("positions %v, want %v", res.Positions, want)
	}
	for k, v := range want {
		if res.Positions[k] != v {
			t.Fatalf("position of %s = %+v, want %+v", k, res.Positions[k], v)
		}
	}
}

func TestRestoreEmpty(t *testing.T) {
	st := open(t, t.TempDir(), nil)
	defer st.Close()
	res, err := st.Restore(testIndex)
	if err != nil || res.Snapshot.Path != "" || res.Index == nil || res.Index.Stats().Residencies != 0 {
		t.Fatalf("restore of an empty dir: %+v, %v", res, err)
	}
}

// TestRestoreRefusesBadSnapshot: a newest snapshot with a flipped byte is
// refused by name and kept aside; the previous one is restored.
func TestRestoreRefusesBadSnapshot(t *testing.T) {
	dir := t.TempDir()
	ranks := []kv.WorkerRank{{ID: "a"}, {ID: "b"}}
	ix := radix.New(testIndex)
	fill(t, ix, ranks[:1])
	cp := &fakeIngest{pos: map[kv.WorkerRank]ingest.Position{{ID: "a"}: {HasSeq: true, Seq: 1}}}
	st := open(t, dir, nil)
	old, err := st.Snapshot(ix, cp)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, ix, ranks)
	cp.pos[kv.WorkerRank{ID: "b"}] = ingest.Position{HasSeq: true, Seq: 2}
	bad, err := st.Snapshot(ix, cp)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bad.Path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(bad.Path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := st.Restore(testIndex)
	if err != nil {
		t.Fatal(err)
	}
	if res.Snapshot.Path != old.Path || len(res.Refused) != 1 || res.Refused[0].Path != bad.Path {
		t.Fatalf("restored %q refusing %+v; want %q refusing %q", res.Snapshot.Path, res.Refused, old.Path, bad.Path)
	}
	if !state.IsBadFile(res.Refused[0].Err) {
		t.Fatalf("refusal %v is not a bad-file error", res.Refused[0].Err)
	}
	if _, err := os.Stat(res.Refused[0].MovedTo); err != nil {
		t.Fatalf("the refused file is not kept aside: %v", err)
	}
	if res.Index.Cached(kv.WorkerRank{ID: "b"}) != 0 || res.Index.Cached(kv.WorkerRank{ID: "a"}) == 0 {
		t.Fatalf("restored the wrong content: a %d, b %d", res.Index.Cached(kv.WorkerRank{ID: "a"}), res.Index.Cached(kv.WorkerRank{ID: "b"}))
	}
	if got := testutil.ToFloat64(st.metrics.refused.WithLabelValues("snapshot")); got != 1 {
		t.Fatalf("refused snapshots counted %v, want 1", got)
	}
}

// TestRestoreOtherGeometry: a snapshot of an index with other shards is not
// used (the index starts empty) and not moved aside: it is not damaged.
func TestRestoreOtherGeometry(t *testing.T) {
	dir := t.TempDir()
	ix := radix.New(testIndex)
	fill(t, ix, []kv.WorkerRank{{ID: "a"}})
	st := open(t, dir, nil)
	defer st.Close()
	info, err := st.Snapshot(ix, &fakeIngest{pos: map[kv.WorkerRank]ingest.Position{{ID: "a"}: {}}})
	if err != nil {
		t.Fatal(err)
	}
	other := testIndex
	other.Shards = 8
	res, err := st.Restore(other)
	if err != nil {
		t.Fatal(err)
	}
	if res.Snapshot.Path != "" || res.Index.Stats().Residencies != 0 {
		t.Fatalf("restored %q with %d residencies into another geometry", res.Snapshot.Path, res.Index.Stats().Residencies)
	}
	if _, err := os.Stat(info.Path); err != nil {
		t.Fatalf("the snapshot of another geometry was moved: %v", err)
	}
}

// TestSnapshotFullDisk: a snapshot that cannot be written leaves the
// previous one, is counted, and returns an error.
func TestSnapshotFullDisk(t *testing.T) {
	dir := t.TempDir()
	ix := radix.New(testIndex)
	fill(t, ix, []kv.WorkerRank{{ID: "a"}})
	cp := &fakeIngest{pos: map[kv.WorkerRank]ingest.Position{{ID: "a"}: {HasSeq: true, Seq: 3}}}
	st := open(t, dir, nil)
	good, err := st.Snapshot(ix, cp)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	full := &state.DiskFull{}
	st, err = Open(Config{Dir: dir, writeHook: full.Hook()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	full.Full.Store(true)
	if _, err := st.Snapshot(ix, cp); err == nil {
		t.Fatal("snapshot on a full disk succeeded")
	}
	if got := testutil.ToFloat64(st.metrics.writes.WithLabelValues("error")); got != 1 {
		t.Fatalf("failed writes counted %v, want 1", got)
	}
	full.Full.Store(false)
	res, err := st.Restore(testIndex)
	if err != nil || res.Snapshot.Path != good.Path {
		t.Fatalf("after a failed write restored %q (%v), want %q", res.Snapshot.Path, err, good.Path)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	if len(names) != 0 {
		t.Fatalf("temp files left: %v", names)
	}
}

func TestOpenLocked(t *testing.T) {
	dir := t.TempDir()
	st := open(t, dir, nil)
	defer st.Close()
	if _, err := Open(Config{Dir: dir}); !errors.Is(err, state.ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
}

func TestOpenSnapshotCPU(t *testing.T) {
	for _, f := range []float64{-1, 1.5} {
		if _, err := Open(Config{Dir: t.TempDir(), SnapshotCPU: f}); err == nil {
			t.Errorf("SnapshotCPU %v accepted", f)
		}
	}
	st, err := Open(Config{Dir: t.TempDir(), SnapshotCPU: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.pace != 1 {
		t.Fatalf("SnapshotCPU 0.5: rests %v per unit of work, want 1", st.pace)
	}
}

// TestRestoreRefusesBadRecords: a snapshot whose checksums hold but whose
// records the index refuses (an engine hash bound twice in a rank) is
// refused like a corrupt one, and the previous snapshot is restored.
func TestRestoreRefusesBadRecords(t *testing.T) {
	ix := radix.New(testIndex)
	fill(t, ix, []kv.WorkerRank{{ID: "a"}})
	st := open(t, t.TempDir(), nil)
	defer st.Close()
	good, err := st.Snapshot(ix, &fakeIngest{pos: map[kv.WorkerRank]ingest.Position{{ID: "a"}: {HasSeq: true, Seq: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	g := ix.Geometry()
	// A root node the importer takes: a key its shard picks.
	shard, key := uint32(0), uint64(12345)
	for ; ; key++ {
		im, err := radix.NewImporter(testIndex, g)
		if err != nil {
			t.Fatal(err)
		}
		if im.Node(0, radix.NoRef, shard, key, 0) == nil {
			break
		}
	}
	bad, err := st.snaps.Write(state.Geometry{Shards: g.Shards, SegmentBlocks: g.SegmentBlocks}, func(w *state.Writer) error {
		if err := w.BeginRank(kv.WorkerRank{ID: "a"}, state.Stream{HasSeq: true, Seq: 9}); err != nil {
			return err
		}
		if err := w.Node(0, state.NoRef, shard, key, 0); err != nil {
			return err
		}
		one := [kv.NumTiers]uint8{1}
		if err := w.Binding(7, 0, one); err != nil {
			return err
		}
		if err := w.Binding(7, 0, one); err != nil { // the same engine hash again
			return err
		}
		return w.EndRank()
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Restore(testIndex)
	if err != nil {
		t.Fatal(err)
	}
	if res.Snapshot.Path != good.Path || len(res.Refused) != 1 || res.Refused[0].Path != bad.Path || res.Refused[0].MovedTo == "" {
		t.Fatalf("restored %q refusing %+v; want %q, refusing and moving %q", res.Snapshot.Path, res.Refused, good.Path, bad.Path)
	}
}
