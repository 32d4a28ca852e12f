package harness

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

// Memory returns the router process's resident set size now (VmRSS) and its
// peak (VmHWM, since start or the last ResetPeak), in bytes.
func (r *Router) Memory() (rss, peak uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		return 0, 0, fmt.Errorf("router memory: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var dst *uint64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			dst = &rss
		case strings.HasPrefix(line, "VmHWM:"):
			dst = &peak
		default:
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return 0, 0, fmt.Errorf("router memory: malformed line %q", line)
		}
		kb, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("router memory: %w", err)
		}
		*dst = kb << 10
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("router memory: no VmRSS in /proc/%d/status", r.cmd.Process.Pid)
	}
	return rss, peak, nil
}

// ResetPeak resets the router's VmHWM to its current RSS (writes 5 to
// /proc/<pid>/clear_refs), so the next Memory reports the peak from now on.
func (r *Router) ResetPeak() error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", r.cmd.Process.Pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("router reset peak rss: %w", err)
	}
	return nil
}
