//go:build unix

package state

import (
	"errors"
	"os"
	"syscall"
)

// flock takes an exclusive, non-blocking flock on f. It conflicts with any
// other open file description of the file, in this process or another, and
// the kernel drops it when the holder exits (even by kill -9).
// It reports busy when someone else holds it.
func flock(f *os.File) (busy bool, err error) {
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == syscall.EINTR {
			continue
		}
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return true, err
		}
		return false, err
	}
}

func funlock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
