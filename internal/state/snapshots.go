package state

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Snapshot files are named snapshot-<seq>.kvs, seq a zero-padded decimal
// one more than any snapshot's in the directory (refused ones included), so
// names sort by age and a name is never reused.
const (
	snapshotPrefix = "snapshot-"
	snapshotSuffix = ".kvs"
)

// SnapshotName is the file name of snapshot seq.
func SnapshotName(seq uint64) string {
	return fmt.Sprintf("%s%020d%s", snapshotPrefix, seq, snapshotSuffix)
}

// parseSnapshotName returns the seq of a snapshot file name, and for a
// refused one (name.bad-...) whether it is.
func parseSnapshotName(name string) (seq uint64, bad, ok bool) {
	if !strings.HasPrefix(name, snapshotPrefix) {
		return 0, false, false
	}
	rest := name[len(snapshotPrefix):]
	i := strings.Index(rest, snapshotSuffix)
	if i != 20 {
		return 0, false, false
	}
	seq, err := strconv.ParseUint(rest[:i], 10, 64)
	if err != nil {
		return 0, false, false
	}
	switch tail := rest[i+len(snapshotSuffix):]; {
	case tail == "":
		return seq, false, true
	case strings.HasPrefix(tail, ".bad-"):
		return seq, true, true
	}
	return 0, false, false
}

// SnapshotsConfig configures NewSnapshots.
type SnapshotsConfig struct {
	// Dir is the open state directory.
	Dir *Dir
	// Keep is how many snapshots a successful Write leaves: the new one and
	// the newest before it. Default 2 (newest and previous).
	Keep int
}

// Snapshots are the index snapshots in a state directory.
type Snapshots struct {
	dir  *Dir
	keep int
	mu   sync.Mutex // one Write at a time
}

// SnapshotInfo describes a snapshot file.
type SnapshotInfo struct {
	Path   string
	Seq    uint64
	Size   int64
	Counts Counts // as written or loaded; zero from List
}

// NewSnapshots returns the snapshots of cfg.Dir.
func NewSnapshots(cfg SnapshotsConfig) *Snapshots {
	if cfg.Keep <= 0 {
		cfg.Keep = 2
	}
	return &Snapshots{dir: cfg.Dir, keep: cfg.Keep}
}

// scan returns the loadable snapshots, newest first, and the highest seq
// of any snapshot file, refused ones included.
func (s *Snapshots) scan() (files []SnapshotInfo, top uint64, err error) {
	ents, err := os.ReadDir(s.dir.path)
	if err != nil {
		return nil, 0, fmt.Errorf("list snapshots in %s: %w", s.dir.path, err)
	}
	for _, e := range ents {
		seq, bad, ok := parseSnapshotName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		top = max(top, seq)
		if !bad {
			files = append(files, SnapshotInfo{Path: s.dir.file(e.Name()), Seq: seq})
		}
	}
	slices.SortFunc(files, func(a, b SnapshotInfo) int { return -cmpUint(a.Seq, b.Seq) })
	return files, top, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// List returns the snapshot files, newest first.
func (s *Snapshots) List() ([]SnapshotInfo, error) {
	files, _, err := s.scan()
	for i := range files {
		if st, serr := os.Stat(files[i].Path); serr == nil {
			files[i].Size = st.Size()
		}
	}
	return files, err
}

// Write writes a new snapshot of an index of geometry g atomically (see
// Dir.WriteFile): fill writes the ranks with w; Write closes it. On error
// (fill's, the disk's) no file changed: the previous snapshots are intact.
// After the new snapshot is in place, all but the newest Keep are removed;
// if that fails the error says so and the returned info (Path set) is the
// snapshot written.
func (s *Snapshots) Write(g Geometry, fill func(w *Writer) error) (SnapshotInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, top, err := s.scan()
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("write snapshot: %w", err)
	}
	info := SnapshotInfo{Seq: top + 1}
	name := SnapshotName(info.Seq)
	err = s.dir.WriteFile(name, func(w io.Writer) error {
		cw := &countingWriter{w: w}
		sw := NewWriter(cw, g)
		if err := fill(sw); err != nil {
			return err
		}
		if err := sw.Close(); err != nil {
			return err
		}
		info.Counts, info.Size = sw.Counts(), cw.n
		return nil
	})
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("write snapshot: %w", err)
	}
	info.Path = s.dir.file(name)
	return info, s.prune()
}

// prune removes all but the newest keep snapshots.
func (s *Snapshots) prune() error {
	files, _, err := s.scan()
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files[min(s.keep, len(files)):] {
		if err := os.Remove(f.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove old snapshot %s: %w", f.Path, err))
		}
	}
	return errors.Join(errs...)
}

// Loaded is what Latest did.
type Loaded struct {
	// Snapshot is the snapshot loaded; Path "" if none was (start empty).
	Snapshot SnapshotInfo
	// Refused are the snapshots tried first and refused, newest first.
	Refused []Refusal
}

// Latest loads the newest valid snapshot: for each snapshot, newest first,
// it calls start for a fresh Visitor (an importer building a new index)
// and reads the file into it with ReadSnapshot. A snapshot found bad
// (corrupt, truncated, future version; a visitor error wrapping
// ErrCorrupt counts as the file's) or that cannot be read (an I/O error)
// is refused: a bad one is moved aside; Latest tries the one before, with
// a new visitor. When the visitor returns an error of its own, Latest
// stops and returns it (the file stays). So when Latest returns a
// Snapshot (Path set) and no error, the last visitor start returned holds
// it. With no valid snapshot, Latest returns a zero Snapshot and no error.
func (s *Snapshots) Latest(start func() Visitor) (Loaded, error) {
	var res Loaded
	files, _, err := s.scan()
	if err != nil {
		return res, fmt.Errorf("load snapshot: %w", err)
	}
	for _, info := range files {
		counts, lerr, rerr := s.loadFile(info.Path, start)
		if lerr != nil {
			return res, fmt.Errorf("load snapshot %s: %w", info.Path, lerr)
		}
		if rerr != nil {
			why := fmt.Errorf("read snapshot %s: %w", info.Path, rerr)
			ref := Refusal{Path: info.Path, Err: why}
			if IsBadFile(rerr) {
				ref = s.dir.refuse(info.Path[len(s.dir.path)+1:], why)
			}
			res.Refused = append(res.Refused, ref)
			continue
		}
		info.Counts = counts
		if st, err := os.Stat(info.Path); err == nil {
			info.Size = st.Size()
		}
		res.Snapshot = info
		return res, nil
	}
	return res, nil
}

// loadFile reads the snapshot at path into a visitor from start; rerr is
// the file's problem, lerr the visitor's own.
func (s *Snapshots) loadFile(path string, start func() Visitor) (c Counts, lerr, rerr error) {
	f, err := os.Open(path)
	if err != nil {
		return c, nil, err
	}
	defer f.Close()
	c, err = ReadSnapshot(bufio.NewReaderSize(f, 256<<10), start())
	var ve *visitorError
	if errors.As(err, &ve) && !IsBadFile(err) {
		return c, err, nil
	}
	return c, nil, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
