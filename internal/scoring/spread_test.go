package scoring

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestReplicasDivergeOnABurst: replicas that decide the same request on the
// same state, as a burst spread over them does before either hears of the
// other's choice, take different ranks when the ranks are near-equal, and
// the same rank when one holds the prompt's prefix; a router without Place
// and a lone replica choose as one router does.
func TestReplicasDivergeOnABurst(t *testing.T) {
	place := func(p, n int) func(*Config) {
		return func(c *Config) {
			c.OnChange = func(LoadChange) {}
			c.Place = func() (int, int) { return p, n }
		}
	}
	fleet := func(mod func(*Config)) *fixture {
		f := newFixture(t, mod)
		for i := range 4 {
			f.addWorker(fmt.Sprintf("engine-%02d", i), "m", 1)
		}
		return f
	}
	route := func(f *fixture, p *Prompt, id string) string {
		d, err := f.r.Route(p, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.WorkerID
	}
	fresh := &Prompt{Model: "m", Tokens: tokens(500, 8*bs)}
	a, b, one, lone := fleet(place(0, 2)), fleet(place(1, 2)), fleet(nil), fleet(place(0, 1))
	wa, wb := route(a, fresh, "a1"), route(b, fresh, "b1")
	if wa == wb {
		t.Fatalf("two replicas took the same idle worker %s for one burst", wa)
	}
	if w1, wl := route(one, fresh, "o1"), route(lone, fresh, "l1"); w1 != wl {
		t.Fatalf("a lone replica took %s, one router %s", wl, w1)
	}
	cached := &Prompt{Model: "m", Tokens: tokens(900, 8*bs)}
	for _, f := range []*fixture{a, b} {
		f.store("engine-02", 0, cached.Tokens, 8, kv.TierDevice)
	}
	if wa, wb := route(a, cached, "a2"), route(b, cached, "b2"); wa != "engine-02" || wb != "engine-02" {
		t.Fatalf("a prompt cached on engine-02 went to %s and %s", wa, wb)
	}
}

// TestPreferOwn: among candidates within the pick's own prefill, each
// replica takes a rank it owns, so replicas deciding at once on the same
// costs diverge, whether or not the guard holds that rank back; a pick
// holding the prefix (a small prefill) and a rank past the tolerance stay
// as they are.
func TestPreferOwn(t *testing.T) {
	const replicas = 2
	m := &model{}
	m.owners.Store(&[]int32{0, 1})
	ranks := []*rank{{key: kv.WorkerRank{ID: "a"}, model: m}, {key: kv.WorkerRank{ID: "b"}, model: m}}
	inf := math.Inf(1)
	for _, tc := range []struct {
		name        string
		costs, own  []float64
		loads       []float64
		bound       float64
		place, want int
	}{
		{name: "owner keeps its pick", costs: []float64{1, 1.1}, own: []float64{.5, .5}, bound: inf, place: 0, want: 0},
		{name: "the other replica takes its own near-equal rank", costs: []float64{1, 1.1}, own: []float64{.5, .5}, bound: inf, place: 1, want: 1},
		{name: "a rank past the pick's prefill is not near", costs: []float64{1, 1.6}, own: []float64{.5, .5}, bound: inf, place: 1, want: 0},
		{name: "a pick holding the prefix keeps the request", costs: []float64{1, 1.1}, own: []float64{.05, .5}, bound: inf, place: 1, want: 0},
		{name: "an own rank the guard holds back is taken when near", costs: []float64{1, 1.1}, own: []float64{.5, .5}, loads: []float64{1, 9}, bound: 2, place: 1, want: 1},
		{name: "an own rank the guard holds back is not taken when far", costs: []float64{1, 1.6}, own: []float64{.5, .5}, loads: []float64{1, 9}, bound: 2, place: 1, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scratch{cands: []int{0, 1}, costs: tc.costs, ownSteps: tc.own, loads: tc.loads, bound: tc.bound}
			if got := s.preferOwn(ranks, 0, tc.place, replicas); got != tc.want {
				t.Errorf("replica %d took %d, want %d", tc.place, got, tc.want)
			}
		})
	}
}

// TestOwnersEven: a model's ranks are dealt out among the replicas so that
// each owns as many as any other, give or take one, for every fleet size
// (a hash modulo the replicas left all four ranks of a small fleet to one
// of three replicas); every replica computes the same owners whatever
// order the workers were registered in, and a removal deals them again.
func TestOwnersEven(t *testing.T) {
	owners := func(f *fixture, model string) map[kv.WorkerRank]int {
		out := map[kv.WorkerRank]int{}
		ranks := f.r.models[model]
		for i, o := range ownerOrder(ranks) {
			out[ranks[i].key] = int(o)
		}
		return out
	}
	for _, n := range []int{1, 2, 3, 4, 5, 8, 16, 17} {
		for _, dp := range []int{1, 2} {
			fwd := newFixture(t, nil)
			rev := newFixture(t, nil)
			for i := range n {
				fwd.addWorker(fmt.Sprintf("engine-%02d", i), "m", dp)
				rev.addWorker(fmt.Sprintf("engine-%02d", n-1-i), "m", dp)
			}
			a, b := owners(fwd, "m"), owners(rev, "m")
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("%d workers x %d: registration order changed the owners:\n%v\n%v", n, dp, a, b)
			}
			for replicas := 2; replicas <= 4; replicas++ {
				count := make([]int, replicas)
				for _, o := range ownerOrder(fwd.r.models["m"]) {
					count[int(o)%replicas]++
				}
				if lo, hi := slices.Min(count), slices.Max(count); hi-lo > 1 {
					t.Errorf("%d ranks over %d replicas: owned %v, want even", n*dp, replicas, count)
				}
			}
		}
	}
	f := newFixture(t, nil)
	for i := range 6 {
		f.addWorker(fmt.Sprintf("engine-%02d", i), "m", 1)
	}
	f.r.RemoveWorker("engine-03")
	if p := f.r.states["m"].owners.Load(); p != nil {
		t.Fatalf("the owners of a changed list were kept: %v", *p)
	}
	count := make([]int, 3)
	for _, o := range ownerOrder(f.r.models["m"]) {
		count[int(o)%3]++
	}
	if slices.Min(count) != 1 || slices.Max(count) != 2 {
		t.Errorf("5 ranks over 3 replicas after a removal: owned %v, want 2/2/1", count)
	}
}
