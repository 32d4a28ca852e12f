package state

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// writeRanks is a Snapshots.Write fill of ranks.
func writeRanks(ranks []rankData) func(w *Writer) error {
	return func(w *Writer) error {
		for _, rd := range ranks {
			w.BeginRank(rd.key, rd.stream)
			for _, b := range rd.blocks {
				w.Block(b)
			}
			if err := w.EndRank(); err != nil {
				return err
			}
		}
		return nil
	}
}

// loadRanks is a Snapshots.Latest load into *out, set only when whole.
func loadRanks(out *[]rankData) func(r *Reader) error {
	return func(r *Reader) error {
		var got []rankData
		for r.NextRank() {
			key, s := r.Rank()
			rd := rankData{key: key, stream: s}
			for r.NextBlock() {
				rd.blocks = append(rd.blocks, r.Block())
			}
			got = append(got, rd)
		}
		if r.Err() == nil {
			*out = got
		}
		return r.Err()
	}
}

func names(t *testing.T, path string) []string {
	t.Helper()
	ents, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestSnapshotsLatest: Write keeps the newest two; Latest loads the newest,
// and when it is bad refuses it by name, moves it aside, and loads the
// previous; with both bad it loads nothing.
func TestSnapshotsLatest(t *testing.T) {
	path := t.TempDir()
	s := NewSnapshots(SnapshotsConfig{Dir: openDir(t, path)})
	if l, err := s.Latest(loadRanks(new([]rankData))); err != nil || l.Snapshot.Path != "" || l.Refused != nil {
		t.Fatalf("empty dir: %+v %v", l, err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	var gens [][]rankData
	for i := range 4 {
		gens = append(gens, genRanks(r, 5, 300))
		info, err := s.Write(writeRanks(gens[i]))
		if err != nil || info.Seq != uint64(i+1) || info.Counts != countOf(gens[i]) || info.Size == 0 {
			t.Fatalf("write %d: %+v %v", i, info, err)
		}
	}
	if got := names(t, path); !slices.Equal(got, []string{"LOCK", SnapshotName(3), SnapshotName(4)}) {
		t.Fatalf("files %v", got)
	}
	var got []rankData
	l, err := s.Latest(loadRanks(&got))
	if err != nil || l.Snapshot.Seq != 4 || len(l.Refused) != 0 || equalRanks(got, gens[3]) != nil {
		t.Fatalf("latest: %+v %v", l, err)
	}

	// Corrupt the newest: the previous is loaded.
	newest := filepath.Join(path, SnapshotName(4))
	b := mustRead(t, newest)
	b[len(b)/2] ^= 0x40
	os.WriteFile(newest, b, 0o644)
	got = nil
	l, err = s.Latest(loadRanks(&got))
	if err != nil || l.Snapshot.Seq != 3 || equalRanks(got, gens[2]) != nil {
		t.Fatalf("fallback: %+v %v", l, err)
	}
	if len(l.Refused) != 1 || !strings.Contains(l.Refused[0].Error(), newest) || !errors.Is(l.Refused[0].Err, ErrCorrupt) {
		t.Fatalf("refused %v", l.Refused)
	}
	t.Log(l.Refused[0])
	if kept := mustRead(t, l.Refused[0].MovedTo); string(kept) != string(b) {
		t.Fatal("refused file not kept as it was")
	}
	// The next snapshot does not reuse the refused one's number.
	info, err := s.Write(writeRanks(gens[0]))
	if err != nil || info.Seq != 5 {
		t.Fatalf("write after refusal: %+v %v", info, err)
	}

	// Both loadable ones bad (one truncated, one of a future version): none loaded.
	os.Truncate(info.Path, info.Size-3)
	prev := filepath.Join(path, SnapshotName(3))
	b = mustRead(t, prev)
	b[8] = 7
	copy(b[12:16], le32(crc(b[:12])))
	os.WriteFile(prev, b, 0o644)
	l, err = s.Latest(loadRanks(new([]rankData)))
	if err != nil || l.Snapshot.Path != "" || len(l.Refused) != 2 ||
		!errors.Is(l.Refused[0].Err, ErrTruncated) || !errors.Is(l.Refused[1].Err, ErrFutureVersion) {
		t.Fatalf("both bad: %+v %v", l, err)
	}
	if got := names(t, path); len(got) != 4 { // LOCK and three kept aside
		t.Fatalf("files %v", got)
	}
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// TestSnapshotsLoadError: load's own error stops Latest and leaves the file.
func TestSnapshotsLoadError(t *testing.T) {
	path := t.TempDir()
	s := NewSnapshots(SnapshotsConfig{Dir: openDir(t, path)})
	if _, err := s.Write(writeRanks(genRanks(rand.New(rand.NewPCG(1, 1)), 3, 10))); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("index full")
	_, err := s.Latest(func(*Reader) error { return boom })
	if !errors.Is(err, boom) || len(names(t, path)) != 2 {
		t.Fatalf("%v, files %v", err, names(t, path))
	}
	// A load that reads nothing still gets the file verified.
	l, err := s.Latest(func(*Reader) error { return nil })
	if err != nil || l.Snapshot.Counts.Ranks != 3 {
		t.Fatalf("%+v %v", l, err)
	}
}

// TestSnapshotsFullDisk: a snapshot write on a full disk fails, leaving
// the previous snapshot loadable, the registry whole, and no temp file.
func TestSnapshotsFullDisk(t *testing.T) {
	var full DiskFull
	path := t.TempDir()
	d, err := OpenDir(DirConfig{Path: path, WriteHook: full.Hook()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	reg, _ := openRegistry(t, d)
	reg.Put(testWorker(1))
	s := NewSnapshots(SnapshotsConfig{Dir: d})
	ranks := genRanks(rand.New(rand.NewPCG(2, 2)), 8, 2000)
	if _, err := s.Write(writeRanks(ranks)); err != nil {
		t.Fatal(err)
	}
	before := names(t, path)
	full.Full.Store(true)
	_, err = s.Write(writeRanks(genRanks(rand.New(rand.NewPCG(3, 3)), 8, 2000)))
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), SnapshotName(2)) {
		t.Fatalf("write on a full disk: %v", err)
	}
	if err := reg.Put(testWorker(2)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("put on a full disk: %v", err)
	}
	full.Full.Store(false)
	if got := names(t, path); !slices.Equal(got, before) {
		t.Fatalf("files %v, were %v", got, before)
	}
	var got []rankData
	if l, err := s.Latest(loadRanks(&got)); err != nil || l.Snapshot.Seq != 1 || equalRanks(got, ranks) != nil {
		t.Fatalf("after the failed write: %+v %v", l, err)
	}
	reg.Close()
	reg2, ref := openRegistry(t, d)
	if ref != nil || ids(reg2.Workers()) != "worker-0001" {
		t.Fatalf("registry after: %v %v", reg2.Workers(), ref)
	}
}

// TestSnapshotName: names sort by seq and parse back; others are ignored.
func TestSnapshotName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		seq     uint64
		bad, ok bool
	}{
		{SnapshotName(42), 42, false, true},
		{SnapshotName(42) + ".bad-1700000000", 42, true, true},
		{SnapshotName(42) + ".123.tmp", 0, false, false},
		{"snapshot-42.kvs", 0, false, false},
		{"registry.log", 0, false, false},
	} {
		seq, bad, ok := parseSnapshotName(tc.name)
		if seq != tc.seq || bad != tc.bad || ok != tc.ok {
			t.Errorf("%s: %d %v %v", tc.name, seq, bad, ok)
		}
	}
	if SnapshotName(9) > SnapshotName(10) {
		t.Error("names do not sort by seq")
	}
}
