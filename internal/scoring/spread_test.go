package scoring

import (
	"math"
	"testing"
	"time"
)

// TestSpreadCosts: the unseen decisions' copies go greedily to the cheapest
// admitted candidate, each raising its cost by its step; the request then
// takes the cheapest.
func TestSpreadCosts(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name         string
		costs, steps []float64
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
		{name: "guard-excluded rank takes no copy", costs: []float64{1, 1.1, 1.2}, steps: []float64{.5, .5, .5}, loads: []float64{9, 1, 1}, bound: 2, unseen: 1, want: 2},
		{name: "copies load the guard", costs: []float64{1, 1.1, 1.2}, steps: []float64{0, 0, 0}, loads: []float64{1, 1, 1}, bound: inf,
			copyLoads: []float64{1, 1, 1}, guard: 1.5, guardStep: .1, unseen: 2, want: 2},
		{name: "copies raise the guard's bound", costs: []float64{1, 1.1, 1.2}, steps: []float64{0, 0, 0}, loads: []float64{1, 1, 1}, bound: inf,
			copyLoads: []float64{1, 1, 1}, guard: 1.5, guardStep: .3, unseen: 2, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scratch{costs: append([]float64(nil), tc.costs...), steps: tc.steps, loads: append([]float64(nil), tc.loads...), bound: tc.bound,
				copyLoads: tc.copyLoads, guard: inf, guardStep: tc.guardStep}
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
	if got := a.r.claimUnseen(); got != 1 {
		t.Fatalf("first Route: unseen %d, want the place, 1", got)
	}
	if _, err := a.r.Route(&Prompt{Model: "m", Tokens: tokens(1000, 4*bs)}, "a1", 0, 0); err != nil {
		t.Fatal(err)
	}
	if got := a.r.claimUnseen(); got != 5 {
		t.Fatalf("third Route: unseen %d, want 1 + 2 x 2", got)
	}
	state := LoadChange{Kind: ChangeRoute, RequestID: "s1", WorkerID: "w1", PrefillBlocks: 1, DecodeBlocks: 1, TTL: time.Minute}
	if err := a.r.ApplyRemote("other", &state); err != nil {
		t.Fatal(err)
	}
	if got := a.r.claimUnseen(); got != 7 {
		t.Fatalf("after a state transfer's entry: unseen %d, want 7", got)
	}
	remote := LoadChange{Kind: ChangeRoute, RequestID: "b1", WorkerID: "w2", DPRank: 1, PrefillBlocks: 1, DecodeBlocks: 1}
	if err := a.r.ApplyRemote("other", &remote); err != nil {
		t.Fatal(err)
	}
	if got := a.r.claimUnseen(); got != 1 {
		t.Fatalf("after another replica's Route: unseen %d, want 1", got)
	}
	one := newFixture(t, place(0, 1))
	for range 3 {
		if got := one.r.claimUnseen(); got != 0 {
			t.Fatalf("a lone replica: unseen %d, want 0", got)
		}
	}
	if got := b.r.claimUnseen(); got != 0 {
		t.Fatalf("a router without Place: unseen %d, want 0", got)
	}
}
