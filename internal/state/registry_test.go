package state

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func testWorker(i int) Worker {
	return Worker{
		WorkerID:         fmt.Sprintf("worker-%04d", i),
		Model:            "llama-3-8b",
		Endpoint:         fmt.Sprintf("10.0.%d.%d:8000", i/256, i%256),
		KVEventsEndpoint: fmt.Sprintf("tcp://10.0.%d.%d:5557", i/256, i%256),
		ReplayEndpoint:   fmt.Sprintf("tcp://10.0.%d.%d:5558", i/256, i%256),
		Topic:            "kv@" + fmt.Sprint(i),
		DPSize:           uint32(1 + i%4),
		BlockSize:        16,
		Source:           []Source{SourceConfig, SourceAPI}[i%2],
	}
}

// tailWorker has every field of the record's optional tail.
func tailWorker() Worker {
	w := testWorker(7)
	w.DPSize = 2
	w.CapacityTokens = 1 << 20
	w.RankKVEventsEndpoints = []string{"tcp://10.0.0.7:5557", "tcp://10.0.0.7:6557"}
	w.RankReplayEndpoints = []string{"tcp://10.0.0.7:5600", "tcp://10.0.0.7:6600"}
	w.RankEndpoints = []string{"10.0.0.7:8000", "10.0.0.7:8001"}
	return w
}

// TestRegistryWorkerTail: capacity and per-rank endpoints survive a
// reopen and a compaction, a worker without them encodes as it did before
// the tail existed, and a tail that is present but empty or overlong is
// refused as corrupt.
func TestRegistryWorkerTail(t *testing.T) {
	plain := testWorker(1)
	enc := appendWorker(nil, &plain)
	dec, err := decodeWorker(enc)
	if err != nil || dec.hasTail() || !dec.Equal(&plain) {
		t.Fatalf("plain worker: %+v %v", dec, err)
	}
	path := t.TempDir()
	d := openDir(t, path)
	r, _ := openRegistry(t, d)
	w := tailWorker()
	if err := r.Put(w); err != nil {
		t.Fatal(err)
	}
	if err := r.Put(plain); err != nil {
		t.Fatal(err)
	}
	size := r.size
	if err := r.Put(tailWorker()); err != nil || r.size != size {
		t.Fatalf("an equal put wrote %d bytes: %v", r.size-size, err)
	}
	r.Close()
	d.Close()
	r2, ref := openRegistry(t, openDir(t, path))
	if ref != nil {
		t.Fatalf("refused: %v", ref)
	}
	got, ok := r2.Get(w.WorkerID)
	if !ok || !got.Equal(&w) {
		t.Fatalf("reopened: %+v, want %+v", got, w)
	}
	long := tailWorker()
	long.RankEndpoints = make([]string, maxRankList+1)
	if err := r2.Put(long); err == nil {
		t.Fatal("a rank list over the limit was stored")
	}
	// A tail of capacity 0 and three empty lists is not canonical.
	if _, err := decodeWorker(append(enc, 0, 0, 0, 0)); err == nil {
		t.Fatal("an empty tail decoded")
	}
	// A count larger than the bytes left allocates nothing and fails.
	if _, err := decodeWorker(append(enc, 1, 0xff, 0xff, 0x03)); err == nil {
		t.Fatal("an overlong list decoded")
	}
}

func openRegistry(t testing.TB, d *Dir) (*Registry, *Refusal) {
	t.Helper()
	r, ref, err := OpenRegistry(RegistryConfig{Dir: d})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, ref
}

func ids(ws []Worker) string {
	var s []string
	for _, w := range ws {
		s = append(s, w.WorkerID)
	}
	return strings.Join(s, ",")
}

// TestRegistryPutDelete: changes survive a reopen; a put replaces; an
// equal put and an unknown delete write nothing.
func TestRegistryPutDelete(t *testing.T) {
	path := t.TempDir()
	d := openDir(t, path)
	r, ref := openRegistry(t, d)
	if ref != nil || len(r.Workers()) != 0 {
		t.Fatalf("new registry: %v %v", ref, r.Workers())
	}
	for i := range 5 {
		if err := r.Put(testWorker(i)); err != nil {
			t.Fatal(err)
		}
	}
	w := testWorker(2)
	w.Endpoint = "elsewhere:1"
	if err := r.Put(w); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Delete("worker-0003"); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	size := r.size
	if err := r.Put(w); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Delete("nobody"); ok || err != nil {
		t.Fatalf("delete unknown: %v %v", ok, err)
	}
	if r.size != size {
		t.Fatalf("no-op changes wrote %d bytes", r.size-size)
	}
	for _, bad := range []Worker{{}, {WorkerID: "x", Source: "yaml"}, {WorkerID: "x", Source: SourceAPI, Model: strings.Repeat("m", maxField+1)}} {
		if err := r.Put(bad); err == nil {
			t.Fatalf("put %+v: no error", bad)
		}
	}
	r.Close()
	d.Close()

	r2, ref := openRegistry(t, openDir(t, path))
	if ref != nil {
		t.Fatal(ref)
	}
	if got := ids(r2.Workers()); got != "worker-0000,worker-0001,worker-0002,worker-0004" {
		t.Fatalf("reopened: %s", got)
	}
	if got, _ := r2.Get("worker-0002"); !got.Equal(&w) {
		t.Fatalf("worker-0002 is %+v", got)
	}
	if r2.records != 4 {
		t.Fatalf("not compacted on open: %d records", r2.records)
	}
}

// TestRegistryCompaction: dead records are compacted away at runtime.
func TestRegistryCompaction(t *testing.T) {
	path := t.TempDir()
	d := openDir(t, path)
	r, _, err := OpenRegistry(RegistryConfig{Dir: d, CompactSlack: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w := testWorker(1)
	for i := range 100 {
		w.Topic = fmt.Sprint(i)
		if err := r.Put(w); err != nil {
			t.Fatal(err)
		}
		if r.records > 2+10+1 {
			t.Fatalf("%d records after %d puts", r.records, i+1)
		}
	}
	live, _, _, err := readJournal(bytes.NewReader(mustRead(t, filepath.Join(path, RegistryName))))
	if got := live[w.WorkerID]; err != nil || !got.Equal(&w) {
		t.Fatalf("on disk: %v %v", live, err)
	}
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// history writes a small journal of puts and deletes and returns the file
// and, for each record boundary, the registry as of it.
func history(t *testing.T) ([]byte, map[int]string) {
	path := t.TempDir()
	d := openDir(t, path)
	r, _ := openRegistry(t, d)
	states := map[int]string{}
	file := filepath.Join(path, RegistryName)
	note := func() { states[len(mustRead(t, file))] = ids(r.Workers()) }
	note()
	for i := range 4 {
		if err := r.Put(testWorker(i)); err != nil {
			t.Fatal(err)
		}
		note()
	}
	r.Delete("worker-0001")
	note()
	r.Put(testWorker(1))
	note()
	r.Delete("worker-0000")
	note()
	return mustRead(t, file), states
}

// reopenWith writes b as the journal of a fresh dir and opens it.
func reopenWith(t *testing.T, b []byte) (*Registry, *Refusal, string) {
	path := t.TempDir()
	os.WriteFile(filepath.Join(path, RegistryName), b, 0o644)
	d, err := OpenDir(DirConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	r, ref := openRegistry(t, d)
	return r, ref, path
}

// TestRegistryTruncated cuts the journal at every offset: a cut at a
// record boundary is the registry as of that record, anything else is
// refused and the registry is the valid prefix. Through OpenRegistry (at
// every boundary and next to it) the refused file is named and kept aside,
// and the journal is whole again after.
func TestRegistryTruncated(t *testing.T) {
	b, states := history(t)
	asOf := func(n int) string { // the state as of the last boundary <= n
		for ; n >= 0; n-- {
			if s, ok := states[n]; ok {
				return s
			}
		}
		return ""
	}
	for n := range len(b) + 1 {
		live, _, good, err := readJournal(bytes.NewReader(b[:n]))
		_, boundary := states[n]
		if boundary != (err == nil) || (err != nil && !errors.Is(err, ErrTruncated)) {
			t.Fatalf("cut at %d (boundary %v): %v", n, boundary, err)
		}
		if got := idsOf(live); got != asOf(n) || (n >= fileHeaderLen && states[int(good)] != got) {
			t.Fatalf("cut at %d: %q, want %q", n, got, asOf(n))
		}
		_, next := states[n+1]
		if !boundary && !next && n != 5 {
			continue
		}
		r, ref, path := reopenWith(t, b[:n])
		if got := ids(r.Workers()); got != asOf(n) || boundary != (ref == nil) {
			t.Fatalf("open cut at %d: %q, want %q; refusal %v", n, got, asOf(n), ref)
		}
		if ref != nil {
			if !errors.Is(ref.Err, ErrTruncated) || !strings.Contains(ref.Error(), filepath.Join(path, RegistryName)) {
				t.Fatalf("cut at %d: %v", n, ref)
			}
			if kept := mustRead(t, ref.MovedTo); !bytes.Equal(kept, b[:n]) {
				t.Fatalf("cut at %d: kept file differs", n)
			}
		}
		if _, _, _, err := readJournal(bytes.NewReader(mustRead(t, filepath.Join(path, RegistryName)))); err != nil {
			t.Fatalf("cut at %d: journal after open: %v", n, err)
		}
	}
}

// TestRegistryEveryByteFlip changes every byte of the journal to several
// values: each is refused, and the registry is the state as of some record
// before the flip.
func TestRegistryEveryByteFlip(t *testing.T) {
	b, states := history(t)
	c := bytes.Clone(b)
	for i := range c {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			c[i] = b[i] ^ x
			live, _, good, err := readJournal(bytes.NewReader(c))
			if !IsBadFile(err) {
				t.Fatalf("byte %d ^ %#02x: %v", i, x, err)
			}
			if good > int64(i) || (states[int(good)] != idsOf(live) && good > 0) {
				t.Fatalf("byte %d ^ %#02x: applied up to %d: %s", i, x, good, idsOf(live))
			}
		}
		c[i] = b[i]
	}
	// Through Open: refused and moved aside.
	c[len(c)-3] ^= 0x10
	_, ref, _ := reopenWith(t, c)
	if ref == nil || !errors.Is(ref.Err, ErrCorrupt) || ref.MovedTo == "" {
		t.Fatalf("refusal %v", ref)
	}
}

func idsOf(live map[string]Worker) string {
	return ids((&Registry{live: live}).Workers())
}

// TestRegistryFutureVersion: refused whole, kept aside, registry empty.
func TestRegistryFutureVersion(t *testing.T) {
	b, _ := history(t)
	binary.LittleEndian.PutUint32(b[8:], 9)
	binary.LittleEndian.PutUint32(b[12:], crc(b[:12]))
	r, ref, _ := reopenWith(t, b)
	if ref == nil || !errors.Is(ref.Err, ErrFutureVersion) || !strings.Contains(ref.Error(), "version 9") {
		t.Fatalf("refusal %v", ref)
	}
	if len(r.Workers()) != 0 || !bytes.Equal(mustRead(t, ref.MovedTo), b) {
		t.Fatal("not refused whole")
	}
}

// TestRegistryFullDisk: a put on a full disk fails, changes nothing on
// disk or in memory, and the registry works once there is room.
func TestRegistryFullDisk(t *testing.T) {
	var full DiskFull
	path := t.TempDir()
	d, err := OpenDir(DirConfig{Path: path, WriteHook: full.Hook()})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := openRegistry(t, d)
	for i := range 3 {
		r.Put(testWorker(i))
	}
	before := mustRead(t, filepath.Join(path, RegistryName))
	full.Full.Store(true)
	if err := r.Put(testWorker(7)); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) {
		t.Fatalf("put on a full disk: %v", err)
	}
	if _, err := r.Delete("worker-0000"); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("delete on a full disk: %v", err)
	}
	if got := ids(r.Workers()); got != "worker-0000,worker-0001,worker-0002" {
		t.Fatalf("in memory: %s", got)
	}
	if !bytes.Equal(mustRead(t, filepath.Join(path, RegistryName)), before) {
		t.Fatal("journal changed")
	}
	// A torn append the store could not cut off: the next put rewrites.
	r.broken = errors.New("test: tail in doubt")
	if err := r.Put(testWorker(8)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("recovering on a full disk: %v", err)
	}
	full.Full.Store(false)
	if err := r.Put(testWorker(8)); err != nil {
		t.Fatal(err)
	}
	r.Close()
	d.Close()
	r2, ref := openRegistry(t, openDir(t, path))
	if got := ids(r2.Workers()); ref != nil || got != "worker-0000,worker-0001,worker-0002,worker-0008" {
		t.Fatalf("reopened: %s %v", got, ref)
	}
}

// TestRegistryKill9: a child process registers workers and is killed -9
// at once after some Puts returned: every acknowledged worker is there.
func TestRegistryKill9(t *testing.T) {
	path := t.TempDir()
	cmd := helperCmd("register", path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := -1
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var i int
		if _, err := fmt.Sscanf(sc.Text(), "ok %d", &i); err != nil {
			cmd.Process.Kill()
			t.Fatalf("child: %s", sc.Text())
		}
		acked = i
		if acked == 30 {
			cmd.Process.Signal(syscall.SIGKILL)
			break
		}
	}
	cmd.Wait()
	r, ref := openRegistry(t, openDir(t, path)) // the lock died with the child
	ws := r.Workers()
	// The child may have finished more Puts between printing "ok 30" and
	// the signal's arrival: every acknowledged one must be there, and what
	// is there must be whole puts in order.
	if len(ws) < acked+1 {
		t.Fatalf("acknowledged %d, found %d (refusal %v)", acked+1, len(ws), ref)
	}
	for i := range ws {
		want := testWorker(i)
		if w, ok := r.Get(want.WorkerID); !ok || !w.Equal(&want) {
			t.Fatalf("worker %d: %+v", i, w)
		}
	}
	t.Logf("acknowledged %d, found %d, refusal: %v", acked+1, len(ws), ref)
}
