package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// lines passes each complete line written to it on a channel.
type lines struct {
	buf []byte
	ch  chan string
}

func (l *lines) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.ch <- string(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}

var lineRE = regexp.MustCompile(`^kvrouter: +[0-9.]+% cache hits, TTFT (\S+ / \S+|not yet measured)  \|  round-robin: +[0-9.]+% cache hits, TTFT (\S+ / \S+|not yet measured).*  \((\d+) / (\d+) requests\)$`)

// TestDemoComparison runs `kvbench demo` against a router built from this
// tree until both fleets have served requests: it prints the header, then
// comparison lines for kvrouter and round-robin side by side.
func TestDemoComparison(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a router and eight engines for several seconds")
	}
	bin := buildRouter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute) // a hang guard, sized for a loaded machine
	defer cancel()
	out := &lines{ch: make(chan string, 64)}
	done := make(chan error, 1)
	go func() {
		done <- runDemo(ctx, []string{"--router-bin", bin, "--grpc-addr=", "--http-addr=", "--log-every", "1s"}, out)
	}()
	var header []string
	for {
		select {
		case err := <-done:
			t.Fatalf("demo ended before both fleets served requests: %v (output %q)", err, header)
		case l := <-out.ch:
			if strings.HasPrefix(l, "kvrouter:") {
				m := lineRE.FindStringSubmatch(l)
				if m == nil {
					t.Fatalf("comparison line %q does not read as expected", l)
				}
				if m[3] == "0" || m[4] == "0" {
					continue
				}
				if !strings.Contains(strings.Join(header, " "), "round-robin") {
					t.Fatalf("no header explaining the line before it: %q", header)
				}
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("demo: %v", err)
				}
				return
			}
			header = append(header, l)
		}
	}
}
