package ingest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

const (
	testBlockSize = 16
	python        = "/usr/bin/python3"
	waitFor       = 60 * time.Second // upper bound of every condition wait, for a loaded 2-core machine
)

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitFor, what)
		}
		time.Sleep(2 * time.Millisecond) // polling interval, not synchronization
	}
}

// testLogger logs to the test at warn level, so failures show what ingest saw.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// newTestManager returns a Manager over a fresh index with invariant checks.
func newTestManager(t testing.TB, check bool) (*Manager, *radix.Index, *prometheus.Registry) {
	t.Helper()
	idx := radix.New(radix.Config{CheckInvariants: check})
	m, reg := newTestManagerOn(t, idx)
	return m, idx, reg
}

// newTestManagerOn returns a Manager over idx, resuming ranks from resume
// (nil: none).
func newTestManagerOn(t testing.TB, idx *radix.Index, resume ...func(kv.WorkerRank) (Position, bool)) (*Manager, *prometheus.Registry) {
	t.Helper()
	return newTestManagerWith(t, idx, func(cfg *Config) {
		if len(resume) > 0 {
			cfg.Resume = resume[0]
		}
	})
}

// newTestManagerWith returns a Manager over idx with the tests' Config as
// mod changes it.
func newTestManagerWith(t testing.TB, idx *radix.Index, mod func(*Config)) (*Manager, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := Config{
		Index: idx, BlockSize: testBlockSize, Logger: testLogger(t), Registerer: reg,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond,
		ReplayTimeout: 10 * time.Second, StopTimeout: 5 * time.Second,
	}
	mod(&cfg)
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m, reg
}

func status(t testing.TB, m *Manager, id string) RankStatus {
	t.Helper()
	st := m.Status(id)
	if len(st) == 0 {
		t.Fatalf("no status for worker %q", id)
	}
	return st[0]
}

// ---- Python (libzmq) publisher ----

var pythonCheck struct {
	once sync.Once
	err  error
}

// requirePython fails the test when /usr/bin/python3 cannot import zmq and
// msgpack: CI installs python3-zmq and python3-msgpack, so a missing module
// is a broken environment, not a reason to skip.
func requirePython(t testing.TB) {
	t.Helper()
	pythonCheck.once.Do(func() {
		out, err := exec.Command(python, "-c", "import zmq, msgpack").CombinedOutput()
		if err != nil {
			pythonCheck.err = fmt.Errorf("%v: %s", err, out)
		}
	})
	if pythonCheck.err != nil {
		t.Fatalf("interop tests need %s with Debian's python3-zmq and python3-msgpack "+
			"(apt-get install python3-zmq python3-msgpack): %v", python, pythonCheck.err)
	}
}

// pyPub is a running testdata/publisher.py.
type pyPub struct {
	t          testing.TB
	cmd        *exec.Cmd
	in         io.WriteCloser
	lines      chan string
	stderr     *bytes.Buffer
	PubPort    int
	ReplayPort int
	done       chan struct{}
}

func startPy(t testing.TB, args ...string) *pyPub {
	t.Helper()
	requirePython(t)
	cmd := exec.Command(python, append([]string{"testdata/publisher.py"}, args...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &pyPub{t: t, cmd: cmd, in: in, lines: make(chan string, 16), stderr: new(bytes.Buffer), done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	var hello struct {
		PubPort    int    `json:"pub_port"`
		ReplayPort int    `json:"replay_port"`
		Error      string `json:"error"`
	}
	p.read(&hello)
	if hello.Error != "" {
		t.Fatalf("publisher: %s", hello.Error)
	}
	p.PubPort, p.ReplayPort = hello.PubPort, hello.ReplayPort
	return p
}

func (p *pyPub) read(v any) {
	p.t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("publisher exited; stderr:\n%s", p.stderr.String())
		}
		if err := json.Unmarshal([]byte(line), v); err != nil {
			p.t.Fatalf("publisher said %q: %v", line, err)
		}
	case <-time.After(waitFor):
		p.t.Fatalf("publisher did not answer; stderr:\n%s", p.stderr.String())
	}
}

func (p *pyPub) call(cmd map[string]any) map[string]any {
	p.t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("publisher stdin: %v; stderr:\n%s", err, p.stderr.String())
	}
	var out map[string]any
	p.read(&out)
	if e, ok := out["error"]; ok {
		p.t.Fatalf("publisher: %v", e)
	}
	return out
}

// publish sends one batch and returns its seq. skip keeps it off the live
// socket (it stays in the replay buffer).
func (p *pyPub) publish(events []map[string]any, skip bool) uint64 {
	p.t.Helper()
	if events == nil {
		events = []map[string]any{}
	}
	out := p.call(map[string]any{"op": "publish", "events": events, "skip": skip})
	return uint64(out["seq"].(float64))
}

// kill stops the process at once (SIGKILL), as a crashing engine.
func (p *pyPub) kill() {
	if p.cmd.Process != nil {
		p.cmd.Process.Kill()
	}
	<-p.done
}

// warmUp publishes empty batches until the router has applied one from the
// live stream, so later batches are not lost to the subscription handshake.
// It expects a fresh rank (LastSeq 0). One batch applied is not proof: the
// connect's catch-up can apply it from the engine's replay buffer while the
// subscription has not reached the publisher yet (ZeroMQ's slow joiner), and
// the next batch is then dropped with nothing after it to show the gap. So
// it waits for two batches in a row, each applied within its wait: the
// second can only have come live (or been replayed for a gap that a later
// live batch showed).
func warmUp(t testing.TB, m *Manager, id string, publish func() uint64) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	inRow := 0
	for inRow < 2 {
		seq := publish()
		if seq == 0 {
			continue // LastSeq starts at 0: wait for a later one
		}
		inRow++
		if !seenWithin(m, id, seq, 100*time.Millisecond) {
			inRow = 0
		}
		if inRow < 2 && time.Now().After(deadline) {
			t.Fatalf("worker %q never received a live batch", id)
		}
	}
}

// seenWithin polls seen for up to d.
func seenWithin(m *Manager, id string, seq uint64, d time.Duration) bool {
	until := time.Now().Add(d)
	for time.Now().Before(until) {
		if seen(m, id, seq) {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// seen reports whether the rank's last applied seq is at least seq.
func seen(m *Manager, id string, seq uint64) bool {
	st := m.Status(id)
	return len(st) > 0 && st[0].LastSeq >= seq && st[0].Connected
}

// ---- the engine's ground truth ----

// engine models what an engine caches, block by block, and builds the events
// that describe its changes.
type engine struct {
	rng    *rand.Rand
	held   map[uint64]bool // engine hash -> held
	chains []*chain
}

type chain struct {
	hashes []uint64
	tokens []uint32
}

func newEngine(seed uint64) *engine {
	return &engine{rng: rand.New(rand.NewPCG(seed, seed^0x9e37)), held: map[uint64]bool{}}
}

// store appends n blocks to parent (nil: a new sequence) and returns the new
// chain and its BlockStored event.
func (e *engine) store(parent *chain, n int) (*chain, map[string]any) {
	c := &chain{}
	var par any
	if parent != nil {
		c.hashes = append(c.hashes, parent.hashes...)
		c.tokens = append(c.tokens, parent.tokens...)
		par = parent.hashes[len(parent.hashes)-1]
	}
	newHashes := make([]uint64, n)
	newTokens := make([]uint32, n*testBlockSize)
	for i := range newHashes {
		newHashes[i] = e.rng.Uint64()
		e.held[newHashes[i]] = true
	}
	for i := range newTokens {
		newTokens[i] = e.rng.Uint32N(1 << 20)
	}
	c.hashes = append(c.hashes, newHashes...)
	c.tokens = append(c.tokens, newTokens...)
	e.chains = append(e.chains, c)
	return c, map[string]any{
		"type": "BlockStored", "block_hashes": newHashes, "parent_block_hash": par,
		"token_ids": newTokens, "block_size": testBlockSize, "medium": "GPU",
	}
}

// remove evicts the last k blocks of c.
func (e *engine) remove(c *chain, k int) map[string]any {
	hs := append([]uint64(nil), c.hashes[len(c.hashes)-k:]...)
	for _, h := range hs {
		delete(e.held, h)
	}
	return map[string]any{"type": "BlockRemoved", "block_hashes": hs, "medium": "GPU"}
}

// clearAll evicts everything.
func (e *engine) clearAll() map[string]any {
	clear(e.held)
	return map[string]any{"type": "AllBlocksCleared"}
}

// forget drops the model (an engine restart).
func (e *engine) forget() {
	clear(e.held)
	e.chains = nil
}

// check compares the index's view of worker w with the engine: the block
// count, and for every chain ever stored, the matched depth equals the
// engine's leading run of held blocks.
func (e *engine) check(idx *radix.Index, w kv.WorkerRank) error {
	if got, want := idx.Cached(w), uint64(len(e.held)); got != want {
		return fmt.Errorf("%v caches %d blocks, engine has %d", w, got, want)
	}
	seed := normalize.Seed("", "")
	var scores []radix.Score
	for ci, c := range e.chains {
		want := 0
		for want < len(c.hashes) && e.held[c.hashes[want]] {
			want++
		}
		hs := normalize.HashPrompt(seed, c.tokens, testBlockSize, nil, nil)
		scores = idx.Match(hs, scores)
		got := 0
		for _, s := range scores {
			if sw, _ := idx.WorkerOf(s.Slot); sw == w {
				got = int(s.Matched)
			}
		}
		if got != want {
			return fmt.Errorf("%v chain %d (%d blocks): matched %d, engine holds the first %d", w, ci, len(c.hashes), got, want)
		}
	}
	return nil
}

// covered checks that the index holds, for worker w, every block the engine
// holds: for every chain ever stored, the matched depth is at least the
// engine's leading run of held blocks (an inexact rank may claim more).
func (e *engine) covered(idx *radix.Index, w kv.WorkerRank) error {
	seed := normalize.Seed("", "")
	var scores []radix.Score
	for ci, c := range e.chains {
		want := 0
		for want < len(c.hashes) && e.held[c.hashes[want]] {
			want++
		}
		scores = idx.Match(normalize.HashPrompt(seed, c.tokens, testBlockSize, nil, nil), scores)
		got := 0
		for _, s := range scores {
			if sw, _ := idx.WorkerOf(s.Slot); sw == w {
				got = int(s.Matched)
			}
		}
		if got < want {
			return fmt.Errorf("%v chain %d (%d blocks): matched %d, engine holds the first %d", w, ci, len(c.hashes), got, want)
		}
	}
	return nil
}

// waitSeq waits until the worker's rank 0 has applied seq.
func waitSeq(t testing.TB, m *Manager, id string, seq uint64) {
	t.Helper()
	eventually(t, fmt.Sprintf("worker %q to apply seq %d", id, seq), func() bool {
		st := m.Status(id)
		return len(st) > 0 && st[0].LastSeq >= seq
	})
}

// checkTruth fails the test unless the index agrees with the engine for w.
func checkTruth(t testing.TB, idx *radix.Index, w kv.WorkerRank, e *engine) {
	t.Helper()
	if err := e.check(idx, w); err != nil {
		t.Fatal(err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func waitDeadline() time.Time { return time.Now().Add(waitFor) }

// deadlinePassed reports whether d has passed, pausing briefly between polls.
func deadlinePassed(d time.Time) bool {
	time.Sleep(2 * time.Millisecond)
	return time.Now().After(d)
}

// flush waits until the worker has applied seq, publishing empty batches
// meanwhile: after a reconnect the publisher may drop batches until it has
// processed the new subscription, and a lost batch at the tail of a stream
// only shows as a gap when the next one arrives.
func flush(t testing.TB, m *Manager, id string, seq uint64, publish func() uint64) {
	t.Helper()
	eventually(t, fmt.Sprintf("worker %q to apply seq %d", id, seq), func() bool {
		if st := m.Status(id); len(st) > 0 && st[0].LastSeq >= seq {
			return true
		}
		publish()
		return false
	})
}
