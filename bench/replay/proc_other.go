//go:build !linux

package replay

import "os/exec"

// detach is a no-op off Linux.
func detach(*exec.Cmd) {}
