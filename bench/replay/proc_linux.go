package replay

import (
	"os/exec"
	"syscall"
)

// detach puts the router in its own process group, so a terminal's Ctrl-C
// reaches only kvbench (which then stops the router in order), and asks the
// kernel to SIGTERM the router if kvbench dies first.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
