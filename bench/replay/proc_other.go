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
