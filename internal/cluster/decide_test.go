package cluster

import (
	"errors"
	"testing"

	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// startDeciding starts a replica that forwards its Routes and serves the
// ones forwarded to it.
func startDeciding(t *testing.T, url, id string) *replica {
	t.Helper()
	return startReplicaWith(t, testConfig(url, id), true)
}

// TestRoutesForwardedToTheOldest: the longest-running replica decides for
// both (the younger one has the smaller id), so a fresh request on each of
// two replicas, a burst no sync lag can order, spreads over the two idle
// workers as one router spreads it; the decider holds both requests as
// its own, the other learns them with its changes, a Route of an id
// active on the decider is refused as one router refuses it, and a mark
// made on the other ends a forwarded request.
func TestRoutesForwardedToTheOldest(t *testing.T) {
	ns := natstest.Start(t)
	old := startDeciding(t, ns.URL(), "b-old")
	young := startDeciding(t, ns.URL(), "a-young")
	eventually(t, "both name b-old", func() bool {
		return young.node.Decider() == "b-old" && old.node.Decider() == "b-old"
	})
	d1, err := old.r.Route(prompt(1), "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := young.r.Route(prompt(2), "r2", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d1.WorkerID == d2.WorkerID {
		t.Fatalf("two fresh prompts on two replicas at once: both on %s", d1.WorkerID)
	}
	if got := decisions(young.node, decisionForwarded); got != 1 {
		t.Fatalf("%v Routes forwarded, want 1", got)
	}
	if _, err := young.r.Route(prompt(3), "r1", 0, 0); !errors.Is(err, scoring.ErrAlreadyExists) {
		t.Fatalf("a Route of an id active on the decider: %v, want ErrAlreadyExists", err)
	}
	if got := decisions(old.node, decisionServed); got != 1 {
		t.Fatalf("%v Routes served, want 1", got)
	}
	if n, _ := old.r.LoadDigest(""); n != 2 {
		t.Fatalf("the decider holds %d requests of its own, want 2", n)
	}
	eventually(t, "the young replica learns both", func() bool { return young.r.ActiveRequests() == 2 })
	if n, _ := young.r.LoadDigest(""); n != 0 {
		t.Fatalf("the forwarding replica holds %d requests of its own, want 0", n)
	}
	if err := young.r.MarkFinished("r2"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a mark on the young replica ends r2 on the decider", func() bool { return old.r.ActiveRequests() == 1 })
}

// TestDeciderGone: a Route forwarded to a decider that stopped is decided
// here (counted unreachable), and once the decider is past the live window
// this replica decides without asking; a forwarded message that does not
// decode is counted and not answered.
func TestDeciderGone(t *testing.T) {
	ns := natstest.Start(t)
	old := startDeciding(t, ns.URL(), "old")
	young := startDeciding(t, ns.URL(), "young")
	eventually(t, "young names old", func() bool { return young.node.Decider() == "old" })

	if err := young.node.nc.Publish(young.node.decideSubject("old"), []byte("KD\x01\x01garbage")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the decider counts a malformed Route", func() bool { return decisions(old.node, decisionMalformed) == 1 })

	if err := old.node.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := young.r.Route(prompt(i), "", 0, 0); err != nil {
			t.Fatalf("Route %d with the decider gone: %v", i, err)
		}
	}
	if got := decisions(young.node, decisionUnreachable); got != 2 {
		t.Fatalf("%v Routes counted unreachable, want 2 (one asked, one backing off)", got)
	}
	eventually(t, "young decides once old is past the live window", func() bool { return young.node.Decider() == "young" })
	if _, err := young.r.Route(prompt(3), "", 0, 0); err != nil {
		t.Fatal(err)
	}
	if got := decisions(young.node, decisionUnreachable); got != 2 {
		t.Fatalf("a Route decided here as the decider was counted unreachable (%v)", got)
	}
}

// TestDeciderBreaksNoTies: the deciding replica decides as one router even
// when another replica routes beside it (one that does not forward, or
// could not reach it), while that replica breaks its near-ties apart.
func TestDeciderBreaksNoTies(t *testing.T) {
	ns := natstest.Start(t)
	dec := startDeciding(t, ns.URL(), "b-decider")
	local := startReplica(t, ns.URL(), "a-local")
	eventually(t, "both name b-decider", func() bool {
		return local.node.Decider() == "b-decider" && dec.node.Decider() == "b-decider"
	})
	for _, r := range []*replica{dec, local} {
		if _, err := r.r.Route(prompt(1), "", 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the local replica counts the decider beside it", func() bool {
		place, n := local.node.Place()
		return place == 0 && n == 2
	})
	eventually(t, "the decider hears the local replica's Route", func() bool {
		dec.node.sync.mu.Lock()
		defer dec.node.sync.mu.Unlock()
		o := dec.node.sync.trk.origins["a-local"]
		return o != nil && !o.routed.IsZero()
	})
	if place, n := dec.node.Place(); place != 0 || n != 1 {
		t.Fatalf("the decider: place %d of %d, want 0 of 1", place, n)
	}
}
