package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

func changesMsg(origin string, epoch, seq uint64, ids ...string) *nats.Msg {
	m := Message{Header: Header{Kind: kindChanges, Origin: origin, Epoch: epoch, Seq: seq}}
	for _, id := range ids {
		m.Changes = append(m.Changes, scoring.LoadChange{Kind: scoring.ChangeRoute, RequestID: id, WorkerID: "w1", PrefillBlocks: 1})
	}
	return &nats.Msg{Subject: "kvrouter.load." + origin, Data: EncodeMessage(m)}
}

// TestResyncKeepsChangesPastTheState: a state reply taken at seq 1 does not
// hold the request added at seq 2, which arrived (and was applied) while
// the state was fetched; ResetRemote releases it, and the held message puts
// it back.
func TestResyncKeepsChangesPastTheState(t *testing.T) {
	ns := natstest.Start(t)
	b := startReplica(t, ns.URL(), "b")
	s := &b.node.sync
	s.mu.Lock()
	s.held["x"] = &held{} // what resync does before it asks
	s.mu.Unlock()
	s.onChanges(changesMsg("x", 1, 1, "r1"))
	s.onChanges(changesMsg("x", 1, 2, "r2"))
	st := &stateParts{h: Header{Kind: kindState, Origin: "x", Epoch: 1, Seq: 1, Last: true},
		changes: []scoring.LoadChange{{Kind: scoring.ChangeRoute, RequestID: "r1", WorkerID: "w1", PrefillBlocks: 1}}, done: true}
	s.applyState(st)
	s.unhold("x")
	if n, _ := b.r.LoadDigest(originKey("x", 1)); n != 2 {
		t.Fatalf("x's requests on b after the resync: %d, want 2 (r2 came after the state)", n)
	}
	if s.heldLen != 0 || len(s.held) != 0 {
		t.Fatalf("held after unhold: %d bytes, %d origins", s.heldLen, len(s.held))
	}
}

// TestStateRepliesBounded: a state reply of more changes than
// MaxStateChanges is refused, and a bootstrap takes parts of at most
// maxBootstrapOrigins origins.
func TestStateRepliesBounded(t *testing.T) {
	state := func(origin string, n int) []byte {
		m := Message{Header: Header{Kind: kindState, Origin: origin, Epoch: 1, Seq: 1, Last: true}}
		for i := range n {
			m.Changes = append(m.Changes, scoring.LoadChange{Kind: scoring.ChangeFinished, RequestID: fmt.Sprint(i)})
		}
		return EncodeMessage(m)
	}
	p := &stateParts{max: 2}
	if err := p.add(state("x", 3)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a state of 3 changes, max 2: %v, want ErrMalformed", err)
	}
	if err := (&stateParts{max: 3}).add(state("x", 3)); err != nil {
		t.Fatalf("a state of 3 changes, max 3: %v", err)
	}

	ns := natstest.Start(t)
	b := startReplica(t, ns.URL(), "b")
	parts := map[string]*stateParts{}
	for i := range maxBootstrapOrigins {
		if b.node.sync.bootstrapPart(parts, state(fmt.Sprint("o", i), 1)) == nil {
			t.Fatalf("origin %d refused", i)
		}
	}
	if b.node.sync.bootstrapPart(parts, state("one-too-many", 1)) != nil || len(parts) != maxBootstrapOrigins {
		t.Fatalf("origin %d taken: %d origins", maxBootstrapOrigins+1, len(parts))
	}
	if b.node.sync.bootstrapPart(parts, state("o0", 1)) != nil {
		t.Fatal("a second state of an origin taken")
	}
}

// TestTwinReplicaID: a changes message under this replica's own id from
// another process (another epoch) is not applied, and is reported.
func TestTwinReplicaID(t *testing.T) {
	ns := natstest.Start(t)
	b := startReplica(t, ns.URL(), "b")
	b.node.sync.onChanges(changesMsg("b", b.node.epoch+1, 1, "r1"))
	if b.r.ActiveRequests() != 0 || !b.node.sync.twin.Load() {
		t.Fatalf("twin's message: %d requests, reported %v; want 0, true", b.r.ActiveRequests(), b.node.sync.twin.Load())
	}
}

// TestNoHeartbeatWithoutLoad: a node whose load is not shared (no
// StartLoad) publishes no heartbeats. (flush is the publisher goroutine's;
// this node's returns before it touches its state. TestGapAndDriftResync
// needs the heartbeats of a node with a load state.)
func TestNoHeartbeatWithoutLoad(t *testing.T) {
	ns := natstest.Start(t)
	n, err := Connect(testConfig(ns.URL(), "quiet"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	out := func() float64 { return testutil.ToFloat64(n.metrics.messages.WithLabelValues("out")) }
	before := out()
	n.pub.flush(true)
	if out() != before {
		t.Fatal("a heartbeat without a load state was published")
	}
}

// TestResyncWhileChangesArrive: the held messages are replayed while
// onChanges goes on holding more (the race detector watches), and every
// request of the origin ends on the receiver.
func TestResyncWhileChangesArrive(t *testing.T) {
	ns := natstest.Start(t)
	b := startReplica(t, ns.URL(), "b")
	s := &b.node.sync
	s.mu.Lock()
	s.held["x"] = &held{}
	s.mu.Unlock()
	const n = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= n; i++ {
			s.onChanges(changesMsg("x", 1, uint64(i), fmt.Sprint("r", i)))
		}
	}()
	// States taken before x's first change (empty, seq 0): each reset
	// releases what was applied, the replay puts it back.
	for range 20 {
		s.applyState(&stateParts{h: Header{Kind: kindState, Origin: "x", Epoch: 1, Seq: 0, Last: true}, done: true})
	}
	<-done
	s.unhold("x")
	if got, _ := b.r.LoadDigest(originKey("x", 1)); got != n {
		t.Fatalf("x's requests on b: %d, want %d", got, n)
	}
}
