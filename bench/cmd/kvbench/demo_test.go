package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedDemoTrace checks that make run has a trace without ../shared/.
func TestEmbeddedDemoTrace(t *testing.T) {
	reqs, err := loadDemoTrace(filepath.Join(t.TempDir(), "missing.jsonl"), 300, 512, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 300 || len(reqs[0].HashIDs) == 0 {
		t.Fatalf("embedded trace: %d requests, first %+v; want 300", len(reqs), reqs[0])
	}
}

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
