package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		in   string
		want string // Endpoint.String() ('@': the router binds), or "error: substring"
	}{
		// A concrete host: the engine binds there, the router dials.
		{"tcp://10.0.0.5:5557", "tcp://10.0.0.5:5557"},
		{"tcp://127.0.0.1:5557", "tcp://127.0.0.1:5557"},
		{"tcp://[::1]:5557", "tcp://[::1]:5557"},
		{"tcp://[fd00::5]:5557", "tcp://[fd00::5]:5557"},
		{"tcp://fd00::5:5557", "tcp://[fd00::5]:5557"}, // libzmq's unbracketed form
		{"tcp://engine-0.local:5557", "tcp://engine-0.local:5557"},
		// A wildcard host: the router binds for engines that connect.
		{"tcp://*:5557", "@tcp://*:5557"}, // vLLM's default, literally: every interface
		{"tcp://:5557", "@tcp://*:5557"},
		{"tcp://0.0.0.0:5557", "@tcp://0.0.0.0:5557"},
		{"tcp://[::]:5557", "@tcp://[::]:5557"},
		{"tcp://:::5557", "@tcp://[::]:5557"},
		{"tcp://*:0", "@tcp://*:0"},
		// '>' dials (a wildcard at loopback), '@' binds.
		{">tcp://10.0.0.5:5557", "tcp://10.0.0.5:5557"},
		{">tcp://*:5557", "tcp://127.0.0.1:5557"},
		{">tcp://0.0.0.0:5557", "tcp://127.0.0.1:5557"},
		{">tcp://[::]:5557", "tcp://[::1]:5557"},
		{"@tcp://10.0.0.1:5557", "@tcp://10.0.0.1:5557"},
		{"@tcp://127.0.0.1:0", "@tcp://127.0.0.1:0"},
		{"@tcp://*:5557", "@tcp://*:5557"},
		{"@tcp://[::]:5557", "@tcp://[::]:5557"},
		// ipc: the engine binds unless '@'; inproc is rejected.
		{"ipc:///tmp/kv.sock", "ipc:///tmp/kv.sock"},
		{">ipc:///tmp/kv.sock", "ipc:///tmp/kv.sock"},
		{"@ipc:///tmp/kv.sock", "@ipc:///tmp/kv.sock"},
		{"inproc://cache", "error: inproc"},
		{">inproc://cache", "error: inproc"},
		{"@inproc://cache", "error: inproc"},
		// Bad ones.
		{"udp://1.2.3.4:5", "error: unsupported transport"},
		{"tcp://*:notaport", "error: bad port"},
		{"tcp://10.0.0.5:-1", "error: bad port"},
		{"tcp://10.0.0.5:+5557", "error: bad port"},
		{"tcp://10.0.0.5:65536", "error: bad port"},
		{"tcp://10.0.0.5:", "error: bad port"},
		{"tcp://*", "error: missing port"},
		{"tcp://[::1:5557", "error: bad host"},
		{"tcp://[10.0.0.5]:5557", "error: bad host"},
		{"tcp://a:b:5557", "error: bad host"},
		{"tcp://a b:5557", "error: bad host"},
		{"tcp://", "error: want transport://address"},
		{"5557", "error: want transport://address"},
		{"tcp://10.0.0.5:0", "error: port 0"},
		{">tcp://10.0.0.5:0", "error: port 0"},
	}
	for _, tt := range tests {
		got, err := ParseEndpoint(tt.in)
		if want, ok := strings.CutPrefix(tt.want, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ParseEndpoint(%q) = %v, %v; want error containing %q", tt.in, got, err, want)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("ParseEndpoint(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// TestParseEndpointAddress: what the router dials or binds. Every interface
// is an empty host (Go's listen on all of them); a wildcard bind hint is
// given only when the host, not '@', made the router bind.
func TestParseEndpointAddress(t *testing.T) {
	tests := []struct {
		in, addr string
		bind     bool
		hint     bool
	}{
		{"tcp://10.0.0.5:5557", "10.0.0.5:5557", false, false},
		{"tcp://*:5557", ":5557", true, true},
		{"tcp://0.0.0.0:5557", "0.0.0.0:5557", true, true},
		{"tcp://[::]:5557", "[::]:5557", true, true},
		{"@tcp://*:5557", ":5557", true, false},
		{"@tcp://127.0.0.1:5557", "127.0.0.1:5557", true, false},
		{">tcp://*:5557", "127.0.0.1:5557", false, false},
		{"ipc:///tmp/kv.sock", "/tmp/kv.sock", false, false},
	}
	for _, tt := range tests {
		e, err := ParseEndpoint(tt.in)
		if err != nil || e.Address != tt.addr || e.Bind != tt.bind || (e.bindHint() != "") != tt.hint {
			t.Errorf("ParseEndpoint(%q) = %+v (hint %q), %v; want address %q, bind %v, hint %v",
				tt.in, e, e.bindHint(), err, tt.addr, tt.bind, tt.hint)
		}
	}
}

func TestRankEndpoint(t *testing.T) {
	tests := []struct {
		base string
		rank int
		want string
	}{
		{"tcp://10.0.0.5:5557", 0, "tcp://10.0.0.5:5557"},
		{"tcp://10.0.0.5:5557", 2, "tcp://10.0.0.5:5559"},
		{"tcp://engine-0:5557", 1, "tcp://engine-0:5558"},
		{"tcp://*:5557", 2, "tcp://*:5559"},
		{"tcp://[::1]:5557", 1, "tcp://[::1]:5558"},
		{"tcp://[::]:5557", 1, "tcp://[::]:5558"},
		{">tcp://10.0.0.5:5557", 3, ">tcp://10.0.0.5:5560"},
		{"@tcp://0.0.0.0:5557", 1, "@tcp://0.0.0.0:5558"},
		{"@ipc:///tmp/kv", 2, "@ipc:///tmp/kv_dp2"},
		{"inproc://cache", 2, "inproc://cache_dp2"},
		{"ipc:///tmp/kv", 1, "ipc:///tmp/kv_dp1"},
		{"tcp://*:65535", 1, "error: out of range"},
		{"tcp://*:5557", -1, "error: negative rank"},
		{"tcp://host", 1, "error: no port"},
		{"ws://x:1", 1, "error: unsupported transport"},
	}
	for _, tt := range tests {
		got, err := RankEndpoint(tt.base, tt.rank)
		if want, ok := strings.CutPrefix(tt.want, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("RankEndpoint(%q, %d) = %q, %v; want error containing %q", tt.base, tt.rank, got, err, want)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("RankEndpoint(%q, %d) = %q, %v; want %q", tt.base, tt.rank, got, err, tt.want)
		}
	}
}

func TestAddErrors(t *testing.T) {
	m, _, _ := newTestManager(t, false)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().String()
	takenPort := l.Addr().(*net.TCPAddr).Port
	if err := m.Add(Worker{ID: "a", KVEndpoint: "tcp://127.0.0.1:5557"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		w    Worker
		want string
	}{
		{Worker{ID: "a", KVEndpoint: "tcp://127.0.0.1:5557"}, "already registered"},
		{Worker{ID: "", KVEndpoint: "tcp://127.0.0.1:5557"}, "ID is empty"},
		{Worker{ID: "b"}, "no KV events endpoint"},
		{Worker{ID: "b", KVEndpoint: "tcp://127.0.0.1:x"}, "bad port"},
		{Worker{ID: "b", KVEndpoint: "tcp://127.0.0.1:0"}, "cannot dial port 0"},
		{Worker{ID: "b", KVEndpoint: "inproc://kv"}, "inproc"},
		{Worker{ID: "b", KVEndpoint: "tcp://127.0.0.1:5557", ReplayEndpoint: "@tcp://127.0.0.1:5558"}, "cannot"},
		{Worker{ID: "b", KVEndpoint: "tcp://127.0.0.1:5557", DPSize: kv.MaxDPSize + 1}, "out of range"},
		{Worker{ID: "b", KVEndpoint: "@tcp://" + taken}, "bind @tcp://" + taken},
		// vLLM's literal endpoint, with the engine already bound on the
		// port: the router binds (and says why and what to write instead).
		{Worker{ID: "b", KVEndpoint: fmt.Sprintf("tcp://*:%d", takenPort)}, "register the engine's address"},
		{Worker{ID: "b", DPSize: 2, RankKVEndpoints: []string{"tcp://127.0.0.1:5557"}}, "1 KV events endpoints for dp size 2"},
		{Worker{ID: "b", DPSize: 2, RankKVEndpoints: []string{"tcp://127.0.0.1:5557", ""}}, "rank 1 has no KV events endpoint"},
		{Worker{ID: "b", KVEndpoint: "tcp://127.0.0.1:5557", RankReplayEndpoints: []string{"a", "b"}}, "2 replay endpoints for dp size 1"},
		{Worker{ID: "b", RankKVEndpoints: []string{"tcp://127.0.0.1:x"}}, "bad port"},
	}
	for _, tt := range tests {
		err := m.Add(tt.w)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Add(%+v) = %v, want error containing %q", tt.w, err, tt.want)
		}
	}
	if st := m.Status("b"); st != nil {
		t.Errorf("failed Add left a worker: %+v", st)
	}
	if err := m.Remove("nope"); err == nil {
		t.Error("Remove of an unknown worker succeeded")
	}
	st := m.Status("a")
	if len(st) != 1 || st[0].Connected {
		t.Errorf("status of a worker with no engine: %+v", st)
	}
}

// TestDataParallelRanks: rank r follows base port + r and lands in the index
// as its own worker/rank.
func TestDataParallelRanks(t *testing.T) {
	m, idx, reg := newTestManager(t, true)
	const dp = 3
	var pubs [dp]zmq4.Socket
	base := 0
	for attempt := 0; attempt < 20 && base == 0; attempt++ {
		base = freePort(t)
		for r := range pubs {
			pubs[r] = zmq4.NewPub(context.Background(), zmq4.WithLogger(log.New(io.Discard, "", 0)))
			if err := pubs[r].Listen(fmt.Sprintf("tcp://127.0.0.1:%d", base+r)); err != nil {
				for _, p := range pubs[:r+1] {
					p.Close()
				}
				base = 0
				break
			}
		}
	}
	if base == 0 {
		t.Fatal("no three consecutive free ports")
	}
	gp := make([]*goPub, dp)
	for r := range pubs {
		gp[r] = &goPub{sock: pubs[r]}
		t.Cleanup(func() { pubs[r].Close() })
	}
	id := "dp"
	if err := m.Add(Worker{ID: id, KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", base), DPSize: dp}); err != nil {
		t.Fatal(err)
	}
	for r := range gp {
		e := newEngine(uint64(50 + r))
		// Warm up rank r: publish until a batch sent one poll interval ago
		// has arrived (the subscription drops batches until it is set up).
		deadline := waitDeadline()
		for sent := uint64(0); ; {
			if sent > 0 && rankSeen(m, id, r, sent) {
				break
			}
			sent = gp[r].publishRank(t, nil, r)
			if deadlinePassed(deadline) {
				t.Fatalf("rank %d never received a batch: %+v", r, m.Status(id))
			}
		}
		var seq uint64
		for i := 0; i <= r; i++ {
			_, ev := e.store(nil, 2)
			seq = gp[r].publishRank(t, []map[string]any{ev}, r)
		}
		eventually(t, fmt.Sprintf("rank %d to apply seq %d", r, seq), func() bool { return rankSeen(m, id, r, seq) })
		checkTruth(t, idx, kv.WorkerRank{ID: id, DPRank: uint32(r)}, e)
	}
	st := m.Status(id)
	if len(st) != dp {
		t.Fatalf("status has %d ranks, want %d", len(st), dp)
	}
	for r, s := range st {
		if s.DPRank != uint32(r) || !s.Connected || s.CachedBlocks != uint64(2*(r+1)) {
			t.Errorf("rank %d: %+v", r, s)
		}
	}
	if got := seriesOf(t, reg, id); got == 0 {
		t.Fatal("no metric series for the worker before Remove")
	}
	if err := m.Remove(id); err != nil {
		t.Fatal(err)
	}
	if got := seriesOf(t, reg, id); got != 0 {
		t.Errorf("%d metric series survive Remove", got)
	}
	for r := 0; r < dp; r++ {
		if got := idx.Cached(kv.WorkerRank{ID: id, DPRank: uint32(r)}); got != 0 {
			t.Errorf("rank %d holds %d blocks after Remove", r, got)
		}
	}
}

// TestRankEndpoints: a worker whose ranks' publishers are not on base port
// + rank (a data-parallel group over hosts) lists them; each rank follows
// its own, and a list that does not match the dp size is refused by
// ErrRankEndpoints.
func TestRankEndpoints(t *testing.T) {
	m, idx, _ := newTestManager(t, true)
	const dp = 2
	var eps []string
	gp := make([]*goPub, dp)
	for r := range gp {
		pub := zmq4.NewPub(context.Background(), zmq4.WithLogger(log.New(io.Discard, "", 0)))
		if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pub.Close() })
		gp[r] = &goPub{sock: pub}
		eps = append(eps, "tcp://"+pub.Addr().String())
	}
	eps[0], eps[1] = eps[1], eps[0] // rank 0 on the other's port: never base + rank
	gp[0], gp[1] = gp[1], gp[0]
	if err := m.Add(Worker{ID: "x", DPSize: dp, RankKVEndpoints: eps[:1]}); !errors.Is(err, ErrRankEndpoints) {
		t.Fatalf("Add with 1 endpoint for 2 ranks: %v, want ErrRankEndpoints", err)
	}
	id := "ranks"
	if err := m.Add(Worker{ID: id, DPSize: dp, RankKVEndpoints: eps}); err != nil {
		t.Fatal(err)
	}
	for r := range gp {
		e := newEngine(uint64(70 + r))
		deadline := waitDeadline()
		for sent := uint64(0); ; {
			if sent > 0 && rankSeen(m, id, r, sent) {
				break
			}
			sent = gp[r].publishRank(t, nil, r)
			if deadlinePassed(deadline) {
				t.Fatalf("rank %d never received a batch: %+v", r, m.Status(id))
			}
		}
		_, ev := e.store(nil, r+1)
		seq := gp[r].publishRank(t, []map[string]any{ev}, r)
		eventually(t, fmt.Sprintf("rank %d to apply seq %d", r, seq), func() bool { return rankSeen(m, id, r, seq) })
		checkTruth(t, idx, kv.WorkerRank{ID: id, DPRank: uint32(r)}, e)
	}
}

func rankSeen(m *Manager, id string, r int, seq uint64) bool {
	st := m.Status(id)
	return len(st) > r && st[r].LastSeq >= seq
}

// publishRank is publish with the batch's dp_rank set to rank.
func (p *goPub) publishRank(t testing.TB, events []map[string]any, rank int) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.seq
	p.seq++
	if err := p.send(nil, seqFrame(seq), encodeBatch(t, events, rank)); err != nil {
		t.Error(err)
	}
	return seq
}

// TestCloseStopsEverything: Close returns promptly and leaves no goroutine
// behind, whether a rank is dialing in backoff, bound and waiting, connected
// to an engine that is silent, or mid replay to a replay socket that never
// answers.
func TestCloseStopsEverything(t *testing.T) {
	base := runtime.NumGoroutine()
	idx := radix.New(radix.Config{})
	m, err := New(Config{Index: idx, BlockSize: testBlockSize, ReconnectMin: time.Millisecond,
		ReconnectMax: 5 * time.Millisecond, ReplayTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// A silent "engine": accepts TCP and completes the ZMTP handshake as a
	// PUB, and a replay "engine" that accepts and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			nc, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, nc)
			mu.Unlock()
			go openZMTP(nc, zmq4.Pub, true)
		}
	}()
	go func() {
		for {
			nc, err := mute.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, nc)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	unused := freePort(t)
	for _, w := range []Worker{
		{ID: "dialing", KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", unused), DPSize: 2},
		{ID: "bound", KVEndpoint: fmt.Sprintf("@tcp://127.0.0.1:%d", freePort(t))},
		{ID: "silent", KVEndpoint: "tcp://" + silent.Addr().String(), ReplayEndpoint: "tcp://" + mute.Addr().String()},
	} {
		if err := m.Add(w); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the silent engine to be connected", func() bool { return status(t, m, "silent").Connected })
	start := time.Now()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := m.Add(Worker{ID: "late", KVEndpoint: "tcp://127.0.0.1:5557"}); err == nil {
		t.Error("Add after Close succeeded")
	}
	silent.Close()
	mute.Close()
	eventually(t, "goroutines to return to the baseline", func() bool {
		return runtime.NumGoroutine() <= base
	})
}

// seriesOf counts the metric series labeled with worker id.
func seriesOf(t *testing.T, reg *prometheus.Registry, id string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			for _, l := range mm.GetLabel() {
				if l.GetName() == "worker" && l.GetValue() == id {
					n++
				}
			}
		}
	}
	return n
}
