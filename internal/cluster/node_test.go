package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/testaddr"
)

// replica is a Node with the scoring Router it shares.
type replica struct {
	node *Node
	r    *scoring.Router
}

func testConfig(url, id string) Config {
	return Config{URL: url, ReplicaID: id, HeartbeatInterval: 50 * time.Millisecond, BootstrapWait: 100 * time.Millisecond, ConnectTimeout: 5 * time.Second}
}

func startReplica(t testing.TB, url, id string) *replica {
	t.Helper()
	return startReplicaWith(t, testConfig(url, id), false)
}

// startReplicaWith connects a replica with cfg and shares its load; a
// deciding one also forwards its Routes and serves the ones forwarded to
// it (decide.go).
func startReplicaWith(t testing.TB, cfg Config, deciding bool) *replica {
	t.Helper()
	n, err := Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	scfg := scoring.Config{Index: radix.New(radix.Config{}), OnChange: n.Publish, Seed: 1}
	if deciding {
		scfg.Forward = n.Forward
	}
	r, err := scoring.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"w1", "w2"} {
		if err := r.AddWorker(scoring.Worker{ID: w, Model: "m", DPSize: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.StartLoad(r); err != nil {
		t.Fatal(err)
	}
	if deciding {
		if err := n.ServeDecisions(r.RouteForwarded); err != nil {
			t.Fatal(err)
		}
	}
	return &replica{node: n, r: r}
}

// eventually polls cond until it holds or the deadline passes; the
// deadline is for a loaded machine, which a passing test never waits out.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within a minute: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func prompt(i int) *scoring.Prompt {
	toks := make([]uint32, 64)
	for j := range toks {
		toks[j] = uint32(i*1000 + j)
	}
	return &scoring.Prompt{Model: "m", Tokens: toks}
}

func digestsAgree(a, b *replica) bool {
	na, sa := a.r.LoadDigest("")
	nb, sb := b.r.LoadDigest(originKey(a.node.ReplicaID(), a.node.epoch))
	return na == nb && sa == sb
}

// TestLoadSharedAndMarksAnywhere: Routes on A are load on B; marks made on
// B end them on A.
func TestLoadSharedAndMarksAnywhere(t *testing.T) {
	ns := natstest.Start(t)
	a := startReplica(t, ns.URL(), "a")
	b := startReplica(t, ns.URL(), "b")
	for i := range 20 {
		if _, err := a.r.Route(prompt(i), fmt.Sprintf("r%d", i), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "B holds A's 20 requests", func() bool { return b.r.ActiveRequests() == 20 && digestsAgree(a, b) })
	for i := range 20 {
		if err := b.r.MarkFinished(fmt.Sprintf("r%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "A's requests finished on B end on A", func() bool { return a.r.ActiveRequests() == 0 && b.r.ActiveRequests() == 0 })
}

// TestLateJoinerBootstraps: a replica started after the load was routed
// gets it in StartLoad, before it serves.
func TestLateJoinerBootstraps(t *testing.T) {
	ns := natstest.Start(t)
	a := startReplica(t, ns.URL(), "a")
	for i := range 5 {
		if _, err := a.r.Route(prompt(i), fmt.Sprintf("r%d", i), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	b := startReplica(t, ns.URL(), "b")
	if n := b.r.ActiveRequests(); n != 5 {
		t.Fatalf("after StartLoad B holds %d requests; want A's 5", n)
	}
	// A's heartbeats, during B's bootstrap wait or after it, do not make B
	// ask A for the state it has just taken.
	in := testutil.ToFloat64(b.node.metrics.messages.WithLabelValues("in"))
	eventually(t, "B hears A's heartbeats", func() bool {
		return testutil.ToFloat64(b.node.metrics.messages.WithLabelValues("in")) >= in+2
	})
	if n := resyncs(b.node, resyncNew); n != 0 {
		t.Fatalf("B resynced A %v times as new after bootstrapping from it", n)
	}
}

// TestNATSRestartResyncs: NATS goes away mid-load; both replicas keep
// routing, and once it is back their load agrees again.
func TestNATSRestartResyncs(t *testing.T) {
	ns := natstest.Start(t)
	a := startReplica(t, ns.URL(), "a")
	b := startReplica(t, ns.URL(), "b")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("r%d", i)
			if _, err := a.r.Route(prompt(i%50), id, 0, 0); err != nil {
				t.Error(err)
				return
			}
			if i%3 == 0 {
				_ = a.r.MarkFinished(id)
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	eventually(t, "B sees load", func() bool { return b.r.ActiveRequests() > 10 })
	ns.Stop()
	eventually(t, "A notices NATS is gone", func() bool { return !a.node.Connected() })
	// Routing goes on from local state.
	before := a.r.ActiveRequests()
	eventually(t, "A routes without NATS", func() bool { return a.r.ActiveRequests() > before+20 })
	// The registry refuses writes at once (a buffered one would time out
	// here and still be applied after the outage).
	if _, err := a.node.CreateWorker(context.Background(), "w-outage", []byte("v")); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("registry create without NATS: %v, want ErrNotConnected", err)
	}
	ns.Restart()
	eventually(t, "both reconnect", func() bool { return a.node.Connected() && b.node.Connected() })
	close(stop)
	wg.Wait()
	eventually(t, "B's view of A agrees with A after the outage", func() bool { return digestsAgree(a, b) })
}

// TestRegistryRace: two replicas creating the same worker id: exactly one
// wins, and both watchers end on the winner's value.
func TestRegistryRace(t *testing.T) {
	ns := natstest.Start(t)
	nodes := make([]*Node, 2)
	seen := make([]sync.Map, 2)
	for i := range nodes {
		n, err := Connect(testConfig(ns.URL(), fmt.Sprintf("n%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close() })
		loaded, err := n.WatchWorkers(func(ev WorkerEvent) { seen[i].Store(ev.ID, string(ev.Value)) })
		if err != nil {
			t.Fatal(err)
		}
		<-loaded
		nodes[i] = n
	}
	for round := range 20 {
		id := fmt.Sprintf("worker/%d", round) // not a valid KV key as is
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, n := range nodes {
			wg.Go(func() { _, errs[i] = n.CreateWorker(context.Background(), id, []byte(n.ReplicaID())) })
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if won >= 0 {
					t.Fatalf("round %d: both creates of %q succeeded", round, id)
				}
				won = i
			case !errors.Is(err, ErrWorkerExists):
				t.Fatalf("round %d: create: %v; want ErrWorkerExists", round, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no create of %q succeeded: %v", round, id, errs)
		}
		want := nodes[won].ReplicaID()
		for i := range nodes {
			eventually(t, "watchers agree", func() bool { v, _ := seen[i].Load(id); return v == want })
		}
	}
	if err := nodes[1].DeleteWorker(context.Background(), "worker/0"); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].CreateWorker(context.Background(), "worker/0", []byte("again")); err != nil {
		t.Fatalf("create after delete: %v", err)
	}
}

// TestConnectUnreachable: no server at the URL is an error in bounded time,
// not a hang.
func TestConnectUnreachable(t *testing.T) {
	refused, err := testaddr.NewRefused()
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	url := "nats://" + refused.Addr()
	cfg := testConfig(url, "x")
	cfg.ConnectTimeout = 500 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		n, err := Connect(cfg)
		if n != nil {
			n.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Connect to a closed port succeeded")
		}
		t.Logf("error: %v", err)
	case <-time.After(time.Minute): // a hang guard, for a loaded machine
		t.Fatal("Connect to a closed port hangs")
	}
}

// TestRestartedReplicaKeepsItsRequests: a replica restarted under the same
// id is a new origin: the other replicas keep the old process's requests
// (their gateways still finish them) however the new one's digests read.
func TestRestartedReplicaKeepsItsRequests(t *testing.T) {
	ns := natstest.Start(t)
	a := startReplica(t, ns.URL(), "a")
	b := startReplica(t, ns.URL(), "b")
	for i := range 5 {
		if _, err := a.r.Route(prompt(i), fmt.Sprintf("old%d", i), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "B holds A's requests", func() bool { return b.r.ActiveRequests() == 5 })
	if err := a.node.Close(); err != nil {
		t.Fatal(err)
	}
	a2 := startReplica(t, ns.URL(), "a")
	if _, err := a2.r.Route(prompt(9), "new", 0, 0); err != nil {
		t.Fatal(err)
	}
	in := func() float64 { return testutil.ToFloat64(b.node.metrics.messages.WithLabelValues("in")) }
	from := in()
	eventually(t, "several digests of the new A reach B", func() bool { return in() >= from+4 && digestsAgree(a2, b) })
	if n := b.r.ActiveRequests(); n != 6 {
		t.Fatalf("B holds %d requests; want the old process's 5 and the new one's", n)
	}
	for i := range 5 {
		if err := a2.r.MarkFinished(fmt.Sprintf("old%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the old requests finished through the new A", func() bool { return b.r.ActiveRequests() == 1 })
}

func resyncs(n *Node, reason string) float64 {
	return testutil.ToFloat64(n.metrics.resyncs.WithLabelValues(reason))
}

func decisions(n *Node, result string) float64 {
	return testutil.ToFloat64(n.metrics.decisions.WithLabelValues(result))
}

// TestGapAndDriftResync: a request the receiver holds that the origin
// does not (drift) is dropped after two disagreeing digests; a skipped
// sequence number makes the receiver ask for the state.
func TestGapAndDriftResync(t *testing.T) {
	ns := natstest.Start(t)
	a := startReplica(t, ns.URL(), "a")
	b := startReplica(t, ns.URL(), "b")
	if _, err := a.r.Route(prompt(1), "r1", 0, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B has r1", func() bool { return b.r.ActiveRequests() == 1 })

	// Drift: B holds a request of A's that A does not.
	ghost := scoring.LoadChange{Kind: scoring.ChangeRoute, RequestID: "ghost", WorkerID: "w1"}
	if err := b.r.ApplyRemote(originKey("a", a.node.epoch), &ghost); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B drops the ghost after two digests", func() bool {
		return resyncs(b.node, resyncDigest) >= 1 && digestsAgree(a, b) && b.r.ActiveRequests() == 1
	})

	// Messages lost: A's next batch skips seqs, and the changes in them
	// never reach B; B asks for A's state.
	a.node.pub.mu.Lock()
	a.node.pub.seq += 5
	a.node.pub.mu.Unlock()
	lost := scoring.LoadChange{Kind: scoring.ChangeRoute, RequestID: "lost", WorkerID: "w2"}
	if err := a.r.ApplyRemote("", &lost); err != nil { // A's own, never published
		t.Fatal(err)
	}
	if _, err := a.r.Route(prompt(2), "r2", 0, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B resyncs on the gap", func() bool {
		return resyncs(b.node, resyncGap) >= 1 && digestsAgree(a, b) && b.r.ActiveRequests() == 3
	})
}
