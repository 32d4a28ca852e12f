package scoring

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestSpreadCosts: the unseen decisions' copies go greedily to the cheapest
// admitted candidate, each raising its cost by its step; the request then
// takes the cheapest.
func TestSpreadCosts(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name         string
		costs, steps []float64
		blind        []float64 // a copy's own costs (nil: costs)
		loads        []float64
		bound        float64
		copyLoads    []float64 // with guard, guardStep: the guard counts copies
		guard        float64
		guardStep    float64
		unseen       int
		want         int // the cheapest after the copies
	}{
		{name: "none unseen", costs: []float64{1, 1.1, 1.2, 5}, steps: []float64{.5, .5, .5, .5}, bound: inf, unseen: 0, want: 0},
		{name: "one unseen takes the cheapest", costs: []float64{1, 1.1, 1.2, 5}, steps: []float64{.5, .5, .5, .5}, bound: inf, unseen: 1, want: 1},
		{name: "two unseen", costs: []float64{1, 1.1, 1.2, 5}, steps: []float64{.5, .5, .5, .5}, bound: inf, unseen: 2, want: 2},
		{name: "a burst wraps round the near-equal ranks", costs: []float64{1, 1.1, 1.2, 5}, steps: []float64{.5, .5, .5, .5}, bound: inf, unseen: 3, want: 0},
		{name: "far costlier rank takes none", costs: []float64{1, 1.1, 1.2, 5}, steps: []float64{.5, .5, .5, .5}, bound: inf, unseen: 6, want: 0},
		{name: "a rank holding the prefix keeps the request", costs: []float64{0.1, 1.1, 1.2}, steps: []float64{.05, 1, 1}, bound: inf, unseen: 5, want: 0},
		{name: "a free copy stops the pricing", costs: []float64{1, 1.1}, steps: []float64{0, 1}, bound: inf, unseen: 3, want: 0},
		{name: "a copy goes where a prompt holding nothing costs least", costs: []float64{1, 0.98}, blind: []float64{1, 1.2}, steps: []float64{.5, .5}, bound: inf, unseen: 1, want: 1},
		{name: "a copy does not go where only this prompt's prefix draws it", costs: []float64{1, 0.5, 1.1}, blind: []float64{1, 1.2, 1.1}, steps: []float64{.6, .6, .6}, bound: inf, unseen: 1, want: 1},
		{name: "guard-excluded rank takes no copy", costs: []float64{1, 1.1, 1.2}, steps: []float64{.5, .5, .5}, loads: []float64{9, 1, 1}, bound: 2, unseen: 1, want: 2},
		{name: "copies load the guard", costs: []float64{1, 1.1, 1.2}, steps: []float64{0, 0, 0}, loads: []float64{1, 1, 1}, bound: inf,
			copyLoads: []float64{1, 1, 1}, guard: 1.5, guardStep: .1, unseen: 2, want: 2},
		{name: "copies raise the guard's bound", costs: []float64{1, 1.1, 1.2}, steps: []float64{0, 0, 0}, loads: []float64{1, 1, 1}, bound: inf,
			copyLoads: []float64{1, 1, 1}, guard: 1.5, guardStep: .3, unseen: 2, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blind := tc.blind
			if blind == nil {
				blind = tc.costs
			}
			s := &scratch{costs: append([]float64(nil), tc.costs...), blind: append([]float64(nil), blind...), steps: tc.steps,
				loads: append([]float64(nil), tc.loads...), blindLoads: append([]float64(nil), tc.loads...), bound: tc.bound,
				copyLoads: tc.copyLoads, blindStep: 1, guard: inf, guardStep: tc.guardStep}
			if tc.copyLoads != nil {
				s.guard = tc.guard
			}
			if tc.loads == nil {
				s.loads = nil
			}
			spreadCosts(s, tc.unseen)
			got, lo := -1, inf
			for i, c := range s.costs {
				if c < lo && (s.loads == nil || s.loads[i] <= s.bound) {
					got, lo = i, c
				}
			}
			if got != tc.want {
				t.Errorf("cheapest after %d copies: %d (costs %v), want %d", tc.unseen, got, s.costs, tc.want)
			}
		})
	}
}

// TestUnseenCountsOwnRoutesSinceRemote: a replica's estimate of the other
// replicas' decisions a Route cannot see grows by (replicas - 1) with each
// of its own Routes and falls back to its place once another replica's
// Route arrives; a state transfer's entry (TTL set) is not a fresh decision.
func TestUnseenCountsOwnRoutesSinceRemote(t *testing.T) {
	place := func(p, n int) func(*Config) {
		return func(c *Config) {
			c.OnChange = func(LoadChange) {}
			c.Place = func() (int, int) { return p, n }
		}
	}
	a := newFixture(t, place(1, 3))
	b := newFixture(t, nil)
	for _, f := range []*fixture{a, b} {
		f.addWorker("w1", "m", 1)
		f.addWorker("w2", "m", 2)
	}
	if got, _, _ := a.r.claimUnseen(); got != 1 {
		t.Fatalf("first Route: unseen %d, want the place, 1", got)
	}
	if _, err := a.r.Route(&Prompt{Model: "m", Tokens: tokens(1000, 4*bs)}, "a1", 0, 0); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := a.r.claimUnseen(); got != 5 {
		t.Fatalf("third Route: unseen %d, want 1 + 2 x 2", got)
	}
	state := LoadChange{Kind: ChangeRoute, RequestID: "s1", WorkerID: "w1", PrefillBlocks: 1, DecodeBlocks: 1, TTL: time.Minute}
	if err := a.r.ApplyRemote("other", &state); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := a.r.claimUnseen(); got != 7 {
		t.Fatalf("after a state transfer's entry: unseen %d, want 7", got)
	}
	remote := LoadChange{Kind: ChangeRoute, RequestID: "b1", WorkerID: "w2", DPRank: 1, PrefillBlocks: 1, DecodeBlocks: 1}
	if err := a.r.ApplyRemote("other", &remote); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := a.r.claimUnseen(); got != 1 {
		t.Fatalf("after another replica's Route: unseen %d, want 1", got)
	}
	one := newFixture(t, place(0, 1))
	for range 3 {
		if got, _, _ := one.r.claimUnseen(); got != 0 {
			t.Fatalf("a lone replica: unseen %d, want 0", got)
		}
	}
	if got, _, _ := b.r.claimUnseen(); got != 0 {
		t.Fatalf("a router without Place: unseen %d, want 0", got)
	}
}

// TestPreferOwn: among candidates within the pick's own prefill, each
// replica takes a rank it owns, so replicas deciding at once on the same
// costs diverge; a pick holding the prefix (a small prefill), a rank past
// the tolerance and a rank the guard excludes stay as they are.
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
		{name: "a guard-excluded own rank is not taken", costs: []float64{1, 1.1}, own: []float64{.5, .5}, loads: []float64{1, 9}, bound: 2, place: 1, want: 0},
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
