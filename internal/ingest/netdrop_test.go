package ingest

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// proxy forwards loopback TCP to a target and can cut every live connection,
// as a network drop would, while the engine keeps running.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	down   bool // refuse new connections
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
	})
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { io.Copy(u, c); u.Close() }()
		go func() { io.Copy(c, u); c.Close() }()
	}
}

// setDown refuses (true) or accepts (false) new connections.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// cut closes every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// TestNetworkDrop: the connection to a running engine drops; the router
// notices, reconnects by itself, and catches up what it missed from the
// replay buffer without clearing anything.
func TestNetworkDrop(t *testing.T) {
	m, idx, _ := newTestManager(t, true)
	p := startPy(t, "--pub", "tcp://*:0", "--replay", "tcp://*:0")
	px := newProxy(t, fmt.Sprintf("127.0.0.1:%d", p.PubPort))
	id := "drop"
	if err := m.Add(Worker{ID: id, KVEndpoint: fmt.Sprintf(">tcp://127.0.0.1:%d", px.port()),
		ReplayEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.ReplayPort)}); err != nil {
		t.Fatal(err)
	}
	warmUp(t, m, id, func() uint64 { return p.publish(nil, false) })
	e := newEngine(31)
	w := kv.WorkerRank{ID: id}
	a, ev := e.store(nil, 3)
	seq := p.publish([]map[string]any{ev}, false)
	waitSeq(t, m, id, seq)
	before := status(t, m, id)

	px.setDown(true)
	px.cut()
	eventually(t, "the router to notice the drop", func() bool { return !status(t, m, id).Connected })
	// While the router is away, the engine moves on.
	_, ev = e.store(a, 2)
	p.publish([]map[string]any{ev}, false)
	p.publish([]map[string]any{e.remove(a, 1)}, false)
	px.setDown(false)
	eventually(t, "the router to reconnect", func() bool { return status(t, m, id).Connected })
	_, ev = e.store(nil, 1)
	seq = p.publish([]map[string]any{ev}, false)
	flush(t, m, id, seq, func() uint64 { return p.publish(nil, false) })
	checkTruth(t, idx, w, e)
	st := status(t, m, id)
	if st.Reconnects <= before.Reconnects || st.EngineRestarts != before.EngineRestarts ||
		st.ReplayFailures != before.ReplayFailures {
		t.Errorf("status after a network drop: %+v (before %+v)", st, before)
	}
}

// TestBackPressure: a slow index stops the reader at the queue bound instead
// of buffering without limit, and nothing is lost once it catches up.
func TestBackPressure(t *testing.T) {
	gate := make(chan struct{})
	var gated *gateSink
	idx := radix.New(radix.Config{})
	m, err := New(Config{Index: idx, BlockSize: testBlockSize, QueueDepth: 4, Logger: testLogger(t),
		newSink: func(w kv.WorkerRank) sink {
			gated = &gateSink{sink: newIndexSink(idx, w, testBlockSize, 0, nil), gate: gate}
			return gated
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := newGoPub(t)
	id := "slow"
	if err := m.Add(Worker{ID: id, KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.port)}); err != nil {
		t.Fatal(err)
	}
	close(gate) // let the warm-up through
	warmUp(t, m, id, func() uint64 { return p.publish(t, nil) })
	gate = make(chan struct{})
	gated.setGate(gate)

	e := newEngine(41)
	var seq uint64
	for i := 0; i < 200; i++ {
		_, ev := e.store(nil, 1)
		seq = p.publish(t, []map[string]any{ev})
	}
	m.mu.Lock()
	r := m.workers[id].ranks[0]
	m.mu.Unlock()
	eventually(t, "the queue to fill", func() bool { return len(r.q) == cap(r.q) })
	if got := status(t, m, id).LastSeq; got >= seq {
		t.Fatalf("applied seq %d through a closed gate", got)
	}
	close(gate)
	waitSeq(t, m, id, seq)
	checkTruth(t, idx, kv.WorkerRank{ID: id}, e)
	if st := status(t, m, id); st.Gaps != 0 || st.ReplayFailures != 0 {
		t.Errorf("status: %+v", st)
	}
}

// gateSink blocks every apply until its gate is closed.
type gateSink struct {
	sink
	mu   sync.Mutex
	gate chan struct{}
}

func (g *gateSink) setGate(c chan struct{}) {
	g.mu.Lock()
	g.gate = c
	g.mu.Unlock()
}

func (g *gateSink) apply(p []byte, st *batchStats) error {
	g.mu.Lock()
	c := g.gate
	g.mu.Unlock()
	<-c
	return g.sink.apply(p, st)
}
