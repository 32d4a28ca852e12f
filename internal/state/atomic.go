package state

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// WriteFile replaces the file name in the directory atomically: write calls
// fill with a buffered writer on a temp file in the same directory, which is
// then flushed, fsynced, closed and renamed over name, and the directory is
// fsynced. If anything fails before the rename (fill's error, a full disk),
// the temp file is removed, the old file is untouched, and the error is
// returned. After WriteFile returns nil, the new content survives a crash.
func (d *Dir) WriteFile(name string, fill func(w io.Writer) error) (err error) {
	path := d.file(name)
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("write %s: state dir closed (its lock released)", path)
	}
	f, err := os.CreateTemp(d.path, name+".*"+tmpSuffix)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	bw := bufio.NewWriterSize(d.writer(path, f), 64<<10)
	if err = fill(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	// Past the rename the new file is in place: only its durability is in doubt.
	return d.syncDir()
}

// MoveAside renames the file name to name.bad-<unix-time> (or with -1, -2,
// ... if taken), so it is kept for inspection and no longer loaded, and
// returns the new path.
func (d *Dir) MoveAside(name string) (string, error) {
	base := name + ".bad-" + strconv.FormatInt(time.Now().Unix(), 10)
	bad := base
	for i := 1; ; i++ {
		if _, err := os.Lstat(d.file(bad)); errors.Is(err, os.ErrNotExist) {
			break
		}
		bad = base + "-" + strconv.Itoa(i)
	}
	if err := os.Rename(d.file(name), d.file(bad)); err != nil {
		return "", fmt.Errorf("move aside %s: %w", d.file(name), err)
	}
	if err := d.syncDir(); err != nil {
		return d.file(bad), err
	}
	return d.file(bad), nil
}

// refuse moves a bad file aside and describes it.
func (d *Dir) refuse(name string, why error) Refusal {
	r := Refusal{Path: d.file(name), Err: why}
	r.MovedTo, r.MoveErr = d.MoveAside(name)
	if r.MoveErr != nil && r.MovedTo != "" {
		r.MoveErr = nil // moved, the directory sync failed: still moved
	}
	return r
}
