package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// maxLogLine bounds the partial line boundLog keeps: a longer line is not a
// bind record and is dropped.
const maxLogLine = 64 << 10

// boundLog reads the router's text log on its way to Config.RouterLog and
// keeps the address each worker's bound rank listens on, as the router
// logs it ("worker=ID ... listening=ADDR", or the same keys in JSON). A rank registered on port 0 is
// bound by the kernel's choice, which no one else can take in between, and
// this is how the harness learns it.
type boundLog struct {
	next    io.Writer
	mu      sync.Mutex
	partial []byte
	addrs   map[string]string
	changed chan struct{} // closed and replaced when addrs gains one
}

func newBoundLog(next io.Writer) *boundLog {
	if next == nil {
		next = io.Discard
	}
	return &boundLog{next: next, addrs: map[string]string{}, changed: make(chan struct{})}
}

func (b *boundLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.partial = append(b.partial, p...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		b.record(string(b.partial[:i]))
		b.partial = b.partial[i+1:]
	}
	if len(b.partial) > maxLogLine {
		b.partial = nil
	}
	b.mu.Unlock()
	return b.next.Write(p)
}

// record keeps a line's worker and listening address; b.mu is held.
func (b *boundLog) record(line string) {
	addr, worker := field(line, "listening"), field(line, "worker")
	var rec struct{ Listening, Worker string }
	if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &rec) == nil {
		addr, worker = rec.Listening, rec.Worker
	}
	if addr == "" || worker == "" {
		return
	}
	b.addrs[worker] = addr
	close(b.changed)
	b.changed = make(chan struct{})
}

// field returns the unquoted value of key=value in a slog text line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// wait returns the address worker's rank was bound on, once logged.
func (b *boundLog) wait(ctx context.Context, worker string, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		b.mu.Lock()
		addr, ch := b.addrs[worker], b.changed
		b.mu.Unlock()
		if addr != "" {
			return addr, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return "", ctx.Err()
		case <-t.C:
			return "", fmt.Errorf("the router logged no bound address for worker %q in %v", worker, timeout)
		}
	}
}
