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

// writeRanks is a Snapshots.Write fill of s's ranks.
func writeRanks(s snapData) func(w *Writer) error {
	return func(w *Writer) error { return writeSnap(w, s.ranks) }
}

// write writes s as a snapshot in snaps.
func write(snaps *Snapshots, s snapData) (SnapshotInfo, error) {
	return snaps.Write(s.g, writeRanks(s))
}

// latest loads the latest snapshot of snaps and returns what was loaded.
func latest(snaps *Snapshots) (snapData, Loaded, error) {
	var c *collector
	l, err := snaps.Latest(func() Visitor { c = new(collector); return c })
	if err != nil || l.Snapshot.Path == "" {
		return snapData{}, l, err
	}
	return c.s, l, err
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
	if _, l, err := latest(s); err != nil || l.Snapshot.Path != "" || l.Refused != nil {
		t.Fatalf("empty dir: %+v %v", l, err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	var gens []snapData
	for i := range 4 {
		gens = append(gens, genSnap(r, 5, 300, 400))
		info, err := write(s, gens[i])
		if err != nil || info.Seq != uint64(i+1) || info.Counts != countOf(gens[i]) || info.Size == 0 {
			t.Fatalf("write %d: %+v %v", i, info, err)
		}
	}
	if got := names(t, path); !slices.Equal(got, []string{"LOCK", SnapshotName(3), SnapshotName(4)}) {
		t.Fatalf("files %v", got)
	}
	got, l, err := latest(s)
	if err != nil || l.Snapshot.Seq != 4 || len(l.Refused) != 0 || equalSnap(got, gens[3]) != nil || l.Snapshot.Counts != countOf(gens[3]) {
		t.Fatalf("latest: %+v %v", l, err)
	}

	// Corrupt the newest: the previous is loaded.
	newest := filepath.Join(path, SnapshotName(4))
	b := mustRead(t, newest)
	b[len(b)/2] ^= 0x40
	os.WriteFile(newest, b, 0o644)
	got, l, err = latest(s)
	if err != nil || l.Snapshot.Seq != 3 || equalSnap(got, gens[2]) != nil {
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
	info, err := write(s, gens[0])
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
	_, l, err = latest(s)
	if err != nil || l.Snapshot.Path != "" || len(l.Refused) != 2 ||
		!errors.Is(l.Refused[0].Err, ErrTruncated) || !errors.Is(l.Refused[1].Err, ErrFutureVersion) {
		t.Fatalf("both bad: %+v %v", l, err)
	}
	if got := names(t, path); len(got) != 4 { // LOCK and three kept aside
		t.Fatalf("files %v", got)
	}
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// TestSnapshotsLoadError: the visitor's own error stops Latest and leaves
// the file; a visitor error wrapping ErrCorrupt refuses the file like any
// bad one, and Latest goes on to the previous with a new visitor.
func TestSnapshotsLoadError(t *testing.T) {
	path := t.TempDir()
	s := NewSnapshots(SnapshotsConfig{Dir: openDir(t, path)})
	gens := []snapData{genSnap(rand.New(rand.NewPCG(1, 1)), 3, 10, 10), genSnap(rand.New(rand.NewPCG(2, 1)), 3, 10, 10)}
	for _, g := range gens {
		if _, err := write(s, g); err != nil {
			t.Fatal(err)
		}
	}
	boom := errors.New("index full")
	_, err := s.Latest(func() Visitor { return &failVisitor{n: 3, err: boom} })
	if !errors.Is(err, boom) || IsBadFile(err) || len(names(t, path)) != 3 {
		t.Fatalf("%v, files %v", err, names(t, path))
	}
	// The newest refused by its visitor (a geometry it cannot take, say).
	var visitors []*collector
	l, err := s.Latest(func() Visitor {
		c := new(collector)
		visitors = append(visitors, c)
		if len(visitors) == 1 {
			return &failVisitor{n: 1, err: formatErr(ErrCorrupt, 0, "not this geometry")}
		}
		return c
	})
	if err != nil || l.Snapshot.Seq != 1 || len(l.Refused) != 1 || !errors.Is(l.Refused[0].Err, ErrCorrupt) ||
		len(visitors) != 2 || equalSnap(visitors[1].s, gens[0]) != nil {
		t.Fatalf("%+v %v", l, err)
	}
	if l.Refused[0].MovedTo == "" {
		t.Fatalf("refused file not moved aside: %+v", l.Refused[0])
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
	snap := genSnap(rand.New(rand.NewPCG(2, 2)), 8, 2000, 2000)
	if _, err := write(s, snap); err != nil {
		t.Fatal(err)
	}
	before := names(t, path)
	full.Full.Store(true)
	_, err = write(s, genSnap(rand.New(rand.NewPCG(3, 3)), 8, 2000, 2000))
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
	if got, l, err := latest(s); err != nil || l.Snapshot.Seq != 1 || equalSnap(got, snap) != nil {
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
