package scoring

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestRankEndpoints: a worker listing each rank's serving address is
// answered with the chosen rank's, and one without the list with its
// Endpoint; the list is the router's own copy.
func TestRankEndpoints(t *testing.T) {
	f := newFixture(t, nil)
	eps := []string{"10.0.0.1:8000", "10.0.0.2:8000"}
	if err := f.r.AddWorker(Worker{ID: "w", Model: "m", Endpoint: "w:8000", DPSize: 2, RankEndpoints: eps}); err != nil {
		t.Fatal(err)
	}
	eps[1] = "changed:1"
	f.addWorker("plain", "m", 1)
	want := map[string][]string{"w": {"10.0.0.1:8000", "10.0.0.2:8000"}, "plain": {"plain:8000"}}
	for _, rank := range []uint32{0, 1} {
		p := tokens(100*(rank+1), 4*bs)
		f.store("w", rank, p, 4, kv.TierDevice)
		d, err := f.r.Route(&Prompt{Model: "m", Tokens: p}, "", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.WorkerID != "w" || d.DPRank != rank || d.Endpoint != want["w"][rank] {
			t.Fatalf("rank %d's prompt went to %s/%d at %s, want w/%d at %s", rank, d.WorkerID, d.DPRank, d.Endpoint, rank, want["w"][rank])
		}
	}
	p := tokens(900, 4*bs)
	f.store("plain", 0, p, 4, kv.TierDevice)
	if d, err := f.r.Route(&Prompt{Model: "m", Tokens: p}, "", 0, 0); err != nil || d.Endpoint != "plain:8000" {
		t.Fatalf("plain worker: %+v %v", d, err)
	}
}
