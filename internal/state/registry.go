package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
)

// The registry is an append-only journal, not a file rewritten whole:
// registering a worker appends one record (~100 bytes) and fdatasyncs it,
// one device flush, where a rewrite costs the whole file plus two flushes
// (the file and the directory after the rename) and grows with the fleet:
// 1,000 workers registered one by one would write ~50 MB and flush 2,000
// times. Each record is a checksummed frame, so a torn or flipped record is
// found; the journal is compacted (rewritten atomically with one record per
// live worker) on open and when dead records outnumber live ones.
//
// Journal file (registry.log): the file header (magic "\x89KVRREG\n",
// version 1), then frames:
//
//	'P' put:    a Worker (see appendWorker); replaces any worker of that id
//	'D' delete: uvarint length and worker id
//
// On open, the records are applied up to the first bad one. A bad record, a
// cut tail, or a bad or future-version header refuses the file: the valid
// prefix is the registry (none for a bad header), the file is moved aside
// and a compacted journal of the prefix replaces it. Only the last record
// can be cut by a crash, and it was never acknowledged (Put returns after
// the sync); a bad record elsewhere is damage, and the records after it are
// not applied, since a lost delete would bring back a worker.

const (
	registryMagic   = "\x89KVRREG\n"
	registryVersion = 1
	// RegistryName is the registry journal's file name.
	RegistryName = "registry.log"

	recPut    = 'P'
	recDelete = 'D'
)

// RegistryConfig configures OpenRegistry.
type RegistryConfig struct {
	// Dir is the open state directory.
	Dir *Dir
	// CompactSlack: the journal is compacted when its records exceed twice
	// the live workers plus this. Default 1024.
	CompactSlack int
}

// Registry is the durable set of registered workers, by WorkerID. Put and
// Delete return after the change is written and synced. Safe for
// concurrent use.
type Registry struct {
	dir   *Dir
	path  string
	slack int

	mu      sync.Mutex
	f       *os.File // the journal, written at size
	size    int64
	records int
	live    map[string]Worker
	// broken is set when the journal's tail is in doubt (a failed write
	// that could not be cut off, a failed sync, a failed compaction): the
	// next change first rewrites the journal from live.
	broken error
	closed bool
	buf    []byte
}

// OpenRegistry loads the registry journal, creating an empty one if there
// is none. A bad journal is refused (see the format comment): the refusal
// is returned and the registry holds the valid prefix. The error is for
// what it could not do (I/O), and then the registry is nil.
func OpenRegistry(cfg RegistryConfig) (*Registry, *Refusal, error) {
	if cfg.Dir == nil {
		return nil, nil, errors.New("open registry: no state dir")
	}
	r := &Registry{dir: cfg.Dir, path: cfg.Dir.file(RegistryName), slack: cfg.CompactSlack, live: map[string]Worker{}}
	if r.slack <= 0 {
		r.slack = 1024
	}
	var refusal *Refusal
	f, err := os.Open(r.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, nil, fmt.Errorf("open registry %s: %w", r.path, err)
	default:
		live, records, _, rerr := readJournal(f)
		f.Close()
		r.live, r.records = live, records
		if rerr != nil {
			if !IsBadFile(rerr) {
				return nil, nil, fmt.Errorf("read registry %s: %w", r.path, rerr)
			}
			ref := r.dir.refuse(RegistryName, fmt.Errorf("read registry %s: %w", r.path, rerr))
			refusal = &ref
			if ref.MoveErr != nil {
				return nil, refusal, ref.MoveErr
			}
		}
	}
	// Compact unless the file is exactly the live set (no dead records).
	if _, err := os.Stat(r.path); err != nil || r.records != len(r.live) {
		if err := r.compact(); err != nil {
			return nil, refusal, err
		}
	} else if err := r.reopen(); err != nil {
		return nil, refusal, err
	}
	return r, refusal, nil
}

// readJournal applies a journal's records in order up to the first bad one
// and returns the workers, the number of records applied, the offset after
// the last one, and why it stopped early (nil at a clean end).
func readJournal(rd io.Reader) (live map[string]Worker, records int, good int64, err error) {
	live = map[string]Worker{}
	fr := frameReader{r: rd}
	if _, err := fr.header(registryMagic, registryVersion); err != nil {
		return live, 0, 0, err
	}
	for {
		good = fr.off
		typ, p, err := fr.next()
		if err == io.EOF {
			return live, records, good, nil
		}
		if err != nil {
			return live, records, good, err
		}
		switch typ {
		case recPut:
			w, err := decodeWorker(p)
			if err != nil {
				return live, records, good, formatErr(ErrCorrupt, good, "put record: %v", err)
			}
			live[w.WorkerID] = w
		case recDelete:
			d := decoder{p: p}
			id := d.string(maxField)
			if d.err == nil && (d.pos != len(p) || id == "") {
				d.fail("bad delete record")
			}
			if d.err != nil {
				return live, records, good, formatErr(ErrCorrupt, good, "delete record: %v", d.err)
			}
			delete(live, id)
		default:
			return live, records, good, formatErr(ErrCorrupt, good, "unknown record type %#02x", typ)
		}
		records++
	}
}

// Workers returns the registered workers, by WorkerID.
func (r *Registry) Workers() []Worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := make([]Worker, 0, len(r.live))
	for _, w := range r.live {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b Worker) int { return strings.Compare(a.WorkerID, b.WorkerID) })
	return ws
}

// Get returns the worker of that id.
func (r *Registry) Get(id string) (Worker, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.live[id]
	return w, ok
}

// Put registers w, replacing any worker of its id, and returns once the
// change is on disk and synced (a Put equal to the stored worker writes
// nothing). On error nothing changed, on disk or in Workers.
func (r *Registry) Put(w Worker) error {
	if err := w.validate(); err != nil {
		return fmt.Errorf("registry %s: put worker %q: %w", r.path, w.WorkerID, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.live[w.WorkerID]; ok && old.Equal(&w) {
		return nil
	}
	r.buf = appendWorker(append(r.buf[:0], make([]byte, frameHeaderLen)...), &w)
	sealFrame(r.buf, recPut)
	if err := r.append(r.buf); err != nil {
		return fmt.Errorf("registry %s: put worker %q: %w", r.path, w.WorkerID, err)
	}
	r.live[w.WorkerID] = w
	r.maybeCompact()
	return nil
}

// Delete unregisters the worker of that id and returns once the change is
// on disk and synced. It reports whether the worker was registered; an
// unknown id writes nothing.
func (r *Registry) Delete(id string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.live[id]; !ok {
		return false, nil
	}
	r.buf = appendString(append(r.buf[:0], make([]byte, frameHeaderLen)...), id)
	sealFrame(r.buf, recDelete)
	if err := r.append(r.buf); err != nil {
		return false, fmt.Errorf("registry %s: delete worker %q: %w", r.path, id, err)
	}
	delete(r.live, id)
	r.maybeCompact()
	return true, nil
}

// Close closes the journal. The registry is unusable after.
func (r *Registry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if r.f == nil {
		return nil
	}
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("close registry %s: %w", r.path, err)
	}
	return nil
}

// append writes one record at the end of the journal and syncs it.
func (r *Registry) append(rec []byte) error {
	if r.closed {
		return errors.New("registry closed")
	}
	if r.broken != nil {
		// The tail is in doubt: rewrite the journal from what is known.
		if err := r.compact(); err != nil {
			return fmt.Errorf("recover from %v: %w", r.broken, err)
		}
	}
	n, err := r.dir.writer(r.path, &offsetWriter{f: r.f, off: r.size}).Write(rec)
	if err == nil && n != len(rec) {
		err = io.ErrShortWrite
	}
	if err != nil {
		// Cut off what was written, so the next record follows the last good one.
		if terr := r.f.Truncate(r.size); terr != nil {
			r.broken = err
		}
		return err
	}
	if err := datasync(r.f); err != nil {
		// After a failed sync the file's content is unknown (the kernel
		// may have dropped the dirty pages): rewrite it before the next change.
		r.broken = err
		return fmt.Errorf("sync: %w", err)
	}
	r.size += int64(len(rec))
	r.records++
	return nil
}

// maybeCompact compacts when dead records outnumber the live ones (plus
// slack). Its failure is not the caller's: the change is already durable;
// the next change retries.
func (r *Registry) maybeCompact() {
	if r.records > 2*len(r.live)+r.slack {
		if err := r.compact(); err != nil {
			r.broken = err
		}
	}
}

// compact atomically replaces the journal with one put per live worker, in
// id order, and reopens it.
func (r *Registry) compact() error {
	ids := make([]string, 0, len(r.live))
	for id := range r.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	err := r.dir.WriteFile(RegistryName, func(w io.Writer) error {
		b := appendFileHeader(nil, registryMagic, registryVersion)
		for _, id := range ids {
			wk := r.live[id]
			start := len(b)
			b = appendWorker(append(b, make([]byte, frameHeaderLen)...), &wk)
			sealFrame(b[start:], recPut)
			if len(b) >= 64<<10 {
				if _, err := w.Write(b); err != nil {
					return err
				}
				b = b[:0]
			}
		}
		_, err := w.Write(b)
		return err
	})
	if err != nil {
		return fmt.Errorf("compact registry: %w", err)
	}
	r.records = len(ids)
	if err := r.reopen(); err != nil {
		return err
	}
	r.broken = nil
	return nil
}

// reopen opens the journal file for appending at its end.
func (r *Registry) reopen() error {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	f, err := os.OpenFile(r.path, os.O_RDWR, 0)
	if err != nil {
		r.broken = err
		return fmt.Errorf("open registry %s: %w", r.path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		r.broken = err
		return fmt.Errorf("open registry %s: %w", r.path, err)
	}
	r.f, r.size = f, st.Size()
	return nil
}

// offsetWriter writes at a fixed offset of a file (pwrite), so a retry
// after a failed write overwrites what that write left.
type offsetWriter struct {
	f   *os.File
	off int64
}

func (w *offsetWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}
