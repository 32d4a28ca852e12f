package cluster

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// TestCloseLeavesNoGoroutines: a node that shared load, watched the
// registry, resynchronised and put a snapshot leaves no goroutine behind
// once Close returns (the NATS client's own end within a moment).
func TestCloseLeavesNoGoroutines(t *testing.T) {
	ns := natstest.Start(t)
	peer := startReplica(t, ns.URL(), "peer")
	baseline := runtime.NumGoroutine()

	n, err := Connect(testConfig(ns.URL(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := scoring.New(scoring.Config{Index: radix.New(radix.Config{}), OnChange: n.Publish, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.StartLoad(r); err != nil {
		t.Fatal(err)
	}
	loaded, err := n.WatchWorkers(func(WorkerEvent) {})
	if err != nil {
		t.Fatal(err)
	}
	<-loaded
	if err := n.sync.resync(peer.node.ReplicaID()); err != nil {
		t.Fatal(err)
	}
	if _, err := n.PutSnapshot(context.Background(), func(w io.Writer) error {
		_, err := io.Copy(w, bytes.NewReader(make([]byte, 1<<20)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	deadline := time.Now().Add(time.Minute) // for a loaded machine
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before Connect:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}
