package cluster

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
)

// TestPlaceCountsReplicasThatRoute: a replica counts another as deciding
// beside it once a Route of the other's arrives, not for its marks or
// digests (a standby, or a replica a gateway sends only marks).
func TestPlaceCountsReplicasThatRoute(t *testing.T) {
	ns := natstest.Start(t)
	a := startReplica(t, ns.URL(), "a")
	b := startReplica(t, ns.URL(), "b")
	if _, err := a.r.Route(prompt(1), "r1", 0, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B holds A's request", func() bool { return b.r.ActiveRequests() == 1 })
	if err := b.r.MarkFinished("r1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B's mark ends the request on A", func() bool { return a.r.ActiveRequests() == 0 })
	if place, n := a.node.Place(); place != 0 || n != 1 {
		t.Fatalf("A, with B only marking: place %d of %d, want 0 of 1", place, n)
	}
	if place, n := b.node.Place(); place != 1 || n != 2 {
		t.Fatalf("B, after A's Route: place %d of %d, want 1 of 2", place, n)
	}
	if _, err := b.r.Route(prompt(2), "r2", 0, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A counts B once B's Route arrives", func() bool {
		place, n := a.node.Place()
		return place == 0 && n == 2
	})
}
