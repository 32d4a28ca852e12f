package cluster

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
)

// cutProxy forwards TCP connections to a NATS server until Cut, which
// resets them all at once, dropping what they carry: a replica's process
// killed, as the server sees it.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []*net.TCPConn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c.(*net.TCPConn), s.(*net.TCPConn))
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c) }()
			go func() { _, _ = io.Copy(c, s) }()
		}
	}()
	t.Cleanup(p.Cut)
	return p
}

func (p *cutProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *cutProxy) Cut() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.SetLinger(0) // a reset, not an orderly close
		_ = c.Close()
	}
	p.conns = nil
}

// TestSyncConfirmsAMark: a mark followed by Sync has reached the server
// when Sync returns, so the other replica learns it even if this replica's
// connection dies the moment after. Replica A batches for an hour: without
// the Sync its finish would still be queued when the connection is cut,
// and B would keep the request.
func TestSyncConfirmsAMark(t *testing.T) {
	ns := natstest.Start(t)
	proxy := newCutProxy(t, ns.URL()[len("nats://"):])
	cfg := testConfig(proxy.URL(), "a")
	cfg.FlushInterval, cfg.HeartbeatInterval = time.Hour, time.Hour
	a := startReplicaWith(t, cfg, false)
	b := startReplica(t, ns.URL(), "b")

	if _, err := a.r.Route(prompt(1), "r1", 0, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B holds A's request", func() bool { return b.r.ActiveRequests() == 1 })
	if err := a.r.MarkFinished("r1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard, for a loaded machine
	defer cancel()
	if err := a.node.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	proxy.Cut()
	eventually(t, "B ends the request A finished", func() bool { return b.r.ActiveRequests() == 0 })
	if got := testutil.ToFloat64(a.node.metrics.confirmFails); got != 0 {
		t.Errorf("%v confirmations failed, want 0", got)
	}
	if n := testutil.CollectAndCount(a.node.metrics.confirmSeconds); n != 1 {
		t.Errorf("confirm histogram has %d series, want 1", n)
	}
}

// TestSyncDoesNotWaitWhileDisconnected: with the connection down, Sync
// answers at once (the replica routes on its own; the change goes out with
// the reconnect), rather than holding the mark until NATS is back.
func TestSyncDoesNotWaitWhileDisconnected(t *testing.T) {
	ns := natstest.Start(t)
	a := startReplica(t, ns.URL(), "a")
	ns.Stop()
	eventually(t, "A sees the connection lost", func() bool { return !a.node.Connected() })
	if err := a.r.MarkFinished("unknown"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard, for a loaded machine
	defer cancel()
	if err := a.node.Sync(ctx); err != nil {
		t.Fatalf("Sync while disconnected: %v", err)
	}
}
