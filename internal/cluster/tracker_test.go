package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestTracker runs testdata/tracker: each command is one input to the
// tracker, its output the verdict.
//
//	changes origin=A epoch=1 seq=3     a changes message
//	digest origin=A epoch=1 remote=2 local=3   a digest (counts; sums equal the counts)
//	synced origin=A epoch=1 seq=7      a state reply taken at seq 7
//	advance d=10m                      the clock moves
//	prune idle=5m                      forget silent origins
//	routed origin=A                    a message of A carried a Route
//	routing self=B window=1m           B's place among itself and the origins that routed within the window
//	decider self=B epoch=5 live=3s    the deciding replica, as B (started at epoch 5) sees it
//	known
func TestTracker(t *testing.T) {
	tr := newTracker()
	now := time.Unix(1_800_000_000, 0)
	datadriven.RunTest(t, "testdata/tracker", func(t *testing.T, d *datadriven.TestData) string {
		var origin string
		var epoch, seq uint64
		if d.HasArg("origin") {
			d.ScanArgs(t, "origin", &origin)
		}
		if d.HasArg("epoch") {
			d.ScanArgs(t, "epoch", &epoch)
		}
		if d.HasArg("seq") {
			d.ScanArgs(t, "seq", &seq)
		}
		switch d.Cmd {
		case "changes":
			return verdictString(tr.changes(origin, epoch, seq, now))
		case "digest":
			var remote, local uint64
			d.ScanArgs(t, "remote", &remote)
			d.ScanArgs(t, "local", &local)
			return verdictString(tr.digest(origin, epoch, Digest{remote, remote}, Digest{local, local}))
		case "synced":
			tr.synced(origin, epoch, seq, now)
			return "ok"
		case "advance":
			now = now.Add(durationArg(t, d, "d"))
			return "ok"
		case "prune":
			return fmt.Sprintf("forgot %v", tr.prune(now, durationArg(t, d, "idle")))
		case "decider":
			var self string
			var selfEpoch uint64
			d.ScanArgs(t, "self", &self)
			d.ScanArgs(t, "epoch", &selfEpoch)
			return tr.decider(self, selfEpoch, now, durationArg(t, d, "live"))
		case "known":
			return strings.Join(tr.known(), " ")
		case "routed":
			tr.routedAt(origin, now)
			return "ok"
		case "routing":
			var self string
			d.ScanArgs(t, "self", &self)
			place, n := tr.routingPlace(self, now, durationArg(t, d, "window"))
			return fmt.Sprintf("place %d of %d", place, n)
		}
		t.Fatalf("unknown command %q", d.Cmd)
		return ""
	})
}

// durationArg is d's argument key, a time.Duration.
func durationArg(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	t.Helper()
	var s string
	d.ScanArgs(t, key, &s)
	dur, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return dur
}

func verdictString(v verdict) string {
	var parts []string
	if v.apply {
		parts = append(parts, "apply")
	} else if v.resync == "" {
		parts = append(parts, "drop")
	}
	if v.resync != "" {
		parts = append(parts, "resync "+v.resync)
	}
	return strings.Join(parts, ", ")
}

// TestTrackerBoundsOrigins: past maxOrigins a new origin is refused (its
// message and its state), the ones followed go on.
func TestTrackerBoundsOrigins(t *testing.T) {
	tr := newTracker()
	now := time.Unix(1_800_000_000, 0)
	for i := range maxOrigins {
		if v := tr.changes(fmt.Sprint("o", i), 1, 1, now); !v.apply {
			t.Fatalf("origin %d: %+v, want applied", i, v)
		}
	}
	if v := tr.changes("one-too-many", 1, 1, now); v.apply || !v.full {
		t.Fatalf("origin %d: %+v, want refused as full", maxOrigins+1, v)
	}
	tr.synced("one-too-many", 1, 5, now)
	if len(tr.origins) != maxOrigins {
		t.Fatalf("%d origins followed, want %d", len(tr.origins), maxOrigins)
	}
	if v := tr.changes("o0", 1, 2, now); !v.apply || v.resync != "" {
		t.Fatalf("a followed origin's next seq: %+v", v)
	}
}
