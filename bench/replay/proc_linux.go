package replay

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// detach puts the router in its own process group, so a terminal's Ctrl-C
// reaches only kvbench (which then stops the router in order), and asks the
// kernel to SIGTERM the router if kvbench dies first.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// CPUTime returns the CPU time (user and system) the router process has used.
func (r *Router) CPUTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("router cpu time: %w", err)
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields 14 and 15 (utime, stime, in clock ticks) count from after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("router cpu time: malformed /proc stat %q", s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("router cpu time: malformed /proc stat %q", s)
	}
	var ticks int64
	for _, x := range f[11:13] {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("router cpu time: %w", err)
		}
		ticks += n
	}
	const clkTck = 100 // USER_HZ, 100 on every Linux ABI Go supports
	return time.Duration(ticks) * time.Second / clkTck, nil
}
