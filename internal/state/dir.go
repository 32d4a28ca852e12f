package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// LockName is the lock file in a state directory.
const LockName = "LOCK"

// tmpSuffix ends the name of a file being written (see WriteFile).
const tmpSuffix = ".tmp"

// DirConfig configures OpenDir.
type DirConfig struct {
	// Path of the state directory; created (with parents) if missing.
	Path string
	// WriteHook, if set, wraps every file write (tests: a full disk).
	WriteHook WriteHook
}

// Dir is an open, locked state directory. Registry and Snapshots keep their
// files in one. Its methods are safe for concurrent use.
type Dir struct {
	path string
	hook WriteHook
	lock *os.File

	mu     sync.Mutex
	closed bool
}

// OpenDir creates the directory if needed and takes its lock: an exclusive
// flock on LOCK, which fails with ErrLocked while another router (or another
// Dir of this process) holds it. It then removes files a crashed write left
// behind (*.tmp). Close releases the lock.
func OpenDir(cfg DirConfig) (*Dir, error) {
	if cfg.Path == "" {
		return nil, errors.New("open state dir: no path")
	}
	path := filepath.Clean(cfg.Path)
	if err := os.MkdirAll(path, 0o750); err != nil {
		return nil, fmt.Errorf("open state dir %s: %w", path, err)
	}
	lockPath := filepath.Join(path, LockName)
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open state dir %s: %w", path, err)
	}
	if busy, err := flock(f); err != nil {
		f.Close()
		if busy {
			holder := "another process"
			if b, rerr := os.ReadFile(lockPath); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
					holder = "pid " + strconv.Itoa(pid)
					if pid == os.Getpid() {
						holder += ", this process"
					}
				}
			}
			return nil, fmt.Errorf("open state dir %s: %w (lock %s held by %s)", path, ErrLocked, lockPath, holder)
		}
		return nil, fmt.Errorf("open state dir %s: lock %s: %w", path, lockPath, err)
	}
	// The pid is for the message above only; the lock is the flock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	d := &Dir{path: path, hook: cfg.WriteHook, lock: f}
	if err := d.removeTemps(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

// Close releases the lock. Files stay.
func (d *Dir) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	uerr := funlock(d.lock)
	if err := d.lock.Close(); err != nil {
		return fmt.Errorf("close state dir %s: %w", d.path, err)
	}
	if uerr != nil {
		return fmt.Errorf("close state dir %s: unlock: %w", d.path, uerr)
	}
	return nil
}

// file is the path of name in the directory.
func (d *Dir) file(name string) string { return filepath.Join(d.path, name) }

// writer applies the write hook, if any, to w writing the file at path.
func (d *Dir) writer(path string, w io.Writer) io.Writer {
	if d.hook != nil {
		return d.hook(path, w)
	}
	return w
}

// removeTemps removes files left by writes a crash interrupted. Holding the
// lock, nobody else writes here.
func (d *Dir) removeTemps() error {
	ents, err := os.ReadDir(d.path)
	if err != nil {
		return fmt.Errorf("open state dir %s: %w", d.path, err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), tmpSuffix) {
			if err := os.Remove(d.file(e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("open state dir %s: remove stale %s: %w", d.path, e.Name(), err)
			}
		}
	}
	return nil
}

// syncDir fsyncs the directory, making renames and creations in it durable.
func (d *Dir) syncDir() error {
	f, err := os.Open(d.path)
	if err != nil {
		return fmt.Errorf("sync state dir %s: %w", d.path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync state dir %s: %w", d.path, err)
	}
	return nil
}
