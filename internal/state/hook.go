package state

import (
	"io"
	"sync/atomic"
	"syscall"
)

// WriteHook wraps the writer of every file a Dir writes (atomic writes and
// registry appends); path is the file's final path. Tests use it to simulate
// a full disk or a failing device. Nil means no hook.
type WriteHook func(path string, w io.Writer) io.Writer

// DiskFull is a WriteHook whose writers fail with ENOSPC while Full is set,
// after writing nothing (Store(true) to fill the disk, Store(false) to free it).
type DiskFull struct{ Full atomic.Bool }

// Hook returns the WriteHook.
func (d *DiskFull) Hook() WriteHook {
	return func(_ string, w io.Writer) io.Writer { return fullWriter{w, d} }
}

type fullWriter struct {
	w io.Writer
	d *DiskFull
}

func (f fullWriter) Write(p []byte) (int, error) {
	if f.d.Full.Load() {
		return 0, syscall.ENOSPC
	}
	return f.w.Write(p)
}
