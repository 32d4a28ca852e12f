//go:build !linux

package replay

import (
	"errors"
	"os/exec"
	"time"
)

// detach is a no-op off Linux.
func detach(*exec.Cmd) {}

// CPUTime is not measured off Linux.
func (r *Router) CPUTime() (time.Duration, error) {
	return 0, errors.New("router cpu time: only measured on Linux")
}

// Memory is not measured off Linux.
func (r *Router) Memory() (rss, peak uint64, err error) {
	return 0, 0, errors.New("router memory: only measured on Linux")
}

// ResetPeak is not available off Linux.
func (r *Router) ResetPeak() error {
	return errors.New("router reset peak rss: only on Linux")
}
