package scoring

import (
	"fmt"
	"math"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

func TestRouteMaxCandidates(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true })
	toks := tokens(1, 8*bs)
	for i := range 6 {
		f.addWorker(fmt.Sprint("w", i), "m", 1)
		f.store(fmt.Sprint("w", i), 0, toks, i, kv.TierDevice) // w5 holds the most
	}
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Candidates) != 3 || d.Candidates[0].WorkerID != "w5" || d.Candidates[1].WorkerID != "w4" || d.Candidates[2].WorkerID != "w3" {
		t.Fatalf("candidates %+v; want w5 (chosen), w4, w3", d.Candidates)
	}
}

// With a limit at or above the candidate count every candidate is listed,
// the chosen one first, as RouteResponse documents; here the chosen worker is
// not the first rank, so listing in rank order would fail.
func TestRouteAllCandidatesChosenFirst(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true })
	toks := tokens(1, 8*bs)
	for i := range 4 {
		f.addWorker(fmt.Sprint("w", i), "m", 1)
		f.store(fmt.Sprint("w", i), 0, toks, 2*i, kv.TierDevice) // w3 holds the most
	}
	for _, limit := range []int{0, 4, 100} {
		d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, limit)
		if err != nil {
			t.Fatal(err)
		}
		if d.WorkerID != "w3" || len(d.Candidates) != 4 || d.Candidates[0].WorkerID != "w3" || d.Candidates[0].Cost != d.Cost {
			t.Fatalf("limit %d: chose %s, candidates %+v; want all 4, w3 first", limit, d.WorkerID, d.Candidates)
		}
		seen := map[string]bool{}
		for _, c := range d.Candidates {
			seen[c.WorkerID] = true
		}
		if len(seen) != 4 {
			t.Fatalf("limit %d: candidates %+v repeat a worker", limit, d.Candidates)
		}
	}
}

// With max_candidates 1 the chosen worker must be the one candidate returned,
// also when temperature sampling chose a worker that is not the cheapest.
func TestRouteMaxCandidatesOneKeepsChosen(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true })
	toks := tokens(1, 8*bs)
	for i := range 4 {
		f.addWorker(fmt.Sprint("w", i), "m", 1)
		f.store(fmt.Sprint("w", i), 0, toks, 2*i, kv.TierDevice)
	}
	notCheapest := 0
	for range 200 {
		d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 50, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.WorkerID != "w3" {
			notCheapest++
		}
		if len(d.Candidates) != 1 || d.Candidates[0].WorkerID != d.WorkerID || d.Candidates[0].Cost != d.Cost {
			t.Fatalf("chose %s (cost %v) but candidates are %+v", d.WorkerID, d.Cost, d.Candidates)
		}
	}
	if notCheapest == 0 {
		t.Fatal("temperature 50 never sampled a worker other than the cheapest; the test checks nothing")
	}
}

// TestExplain checks the reason a Decision gives and round robin's
// expected match, from the candidates' matched blocks, costs and guard
// loads.
func TestExplain(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name        string
		depth       []uint32
		costs       []float64
		loads       []float64
		bound       float64
		pick        int
		temperature float64
		diverted    bool
		want        string
		random      float64
	}{
		{name: "one candidate", depth: []uint32{3}, costs: []float64{1}, loads: []float64{0}, bound: inf, want: ReasonSingle, random: 3},
		{name: "the longest match", depth: []uint32{1, 4, 0}, costs: []float64{3, 1, 4}, loads: []float64{0, 0, 0}, bound: inf, pick: 1, want: ReasonCache, random: 5.0 / 3},
		{name: "equal matches", depth: []uint32{2, 2}, costs: []float64{3, 1}, loads: []float64{0, 0}, bound: inf, pick: 1, want: ReasonLoad, random: 2},
		{name: "no match", depth: []uint32{0, 0}, costs: []float64{3, 1}, loads: []float64{0, 0}, bound: inf, pick: 1, want: ReasonLoad},
		{name: "load over a longer match", depth: []uint32{5, 1}, costs: []float64{9, 2}, loads: []float64{0, 0}, bound: inf, pick: 1, want: ReasonLoad, random: 3},
		{name: "guard", depth: []uint32{5, 1}, costs: []float64{1, 2}, loads: []float64{9, 0}, bound: 4, pick: 1, diverted: true, want: ReasonGuard, random: 3},
		{name: "sampled", depth: []uint32{5, 1}, costs: []float64{1, 2}, loads: []float64{0, 0}, bound: inf, pick: 1, temperature: 0.5, want: ReasonSampled, random: 3},
		{name: "sampled the cheapest admitted", depth: []uint32{5, 1, 0}, costs: []float64{5, 2, 3}, loads: []float64{9, 0, 0}, bound: 4, pick: 1, temperature: 0.5, want: ReasonLoad, random: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scratch{depth: tc.depth, costs: tc.costs, loads: tc.loads, bound: tc.bound}
			for i := range tc.depth {
				s.cands = append(s.cands, i)
			}
			dec := &Decision{Diverted: tc.diverted}
			s.explain(dec, tc.pick, tc.temperature)
			if dec.Reason != tc.want || dec.RandomMatched != tc.random {
				t.Errorf("reason %q, random matched %v; want %q, %v", dec.Reason, dec.RandomMatched, tc.want, tc.random)
			}
		})
	}
}
