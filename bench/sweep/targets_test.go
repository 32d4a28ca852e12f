package sweep

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/stats"
)

// targetCell is a cell with kvrouter's and round-robin's TTFT (seconds),
// kvrouter's hit rate of the ceiling and imbalance, round-robin's hit rate.
func targetCell(trace string, load, ceiling, rrHit, p50, p99, rrP50, rrP99, ofCeiling, imb float64, floor *stats.Summary) Cell {
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	kv := Result{TTFTP50Ratio: p50 / rrP50, TTFTP99Ratio: p99 / rrP99}
	kv.Policy, kv.HitRateOfCeiling, kv.Imbalance, kv.PrefillImbalance = Policies[0].Name, ofCeiling, imb, imb
	kv.TTFT.P50, kv.TTFT.P99, kv.TPOT.P50 = sec(p50), sec(p99), 10*time.Millisecond
	rr := Result{TTFTP50Ratio: 1, TTFTP99Ratio: 1}
	rr.Policy, rr.HitRate, rr.TTFT.P50, rr.TTFT.P99 = Baseline, rrHit, sec(rrP50), sec(rrP99)
	return Cell{Trace: trace, Capacity: 4096, Load: load, PooledCeiling: ceiling, PrefillShare: 0.9,
		TraceSeconds: 100, TTFTFloor: floor, Results: []Result{kv, rr}}
}

// TestTargets: each target counts its cells and misses; a 3x miss is out of
// reach when the floor is over a third of round-robin's percentile, or when
// the fleet is overloaded for any routing by more than a third of
// round-robin's excess; otherwise it is within reach.
func TestTargets(t *testing.T) {
	fl := &stats.Summary{P50: 80 * time.Millisecond, P99: 150 * time.Millisecond}
	rep := &Report{Policies: Policies, Baseline: Baseline, Cells: []Cell{
		// light load: meets everything that applies (no 3x target at 70%)
		targetCell("light", 0.7, 0.5, 0.2, 0.08, 0.2, 0.1, 0.25, 0.95, 1.1, fl),
		// 100%: 3x met at both percentiles
		targetCell("met", 1, 0.5, 0.2, 0.3, 1, 1, 4, 0.95, 1.1, fl),
		// 100%: p50 misses, its floor (0.08 s) is over round-robin's 0.2 s / 3
		targetCell("floor", 1, 0.5, 0.2, 0.18, 0.1, 0.2, 1, 0.85, 1.1, fl),
		// 130%: least load 1.3 x (1 - 0.9 x 0.1) = 1.18, round-robin's 1.3 x
		// (1 - 0.9 x 0.05) = 1.24: a fluid queue gains 1.3x at most
		targetCell("overload", 1.3, 0.1, 0.05, 5, 20, 6, 30, 0.95, 1.1, fl),
		// 130%: the ceiling takes the load under 1: within reach, missed
		targetCell("reach", 1.3, 0.8, 0.3, 2, 20, 3, 30, 0.95, 1.4, fl),
		// 100%: p50 out of reach (the floor), p99 within reach: the target,
		// which wants both, is out of reach
		targetCell("half", 1, 0.5, 0.2, 0.18, 0.5, 0.2, 1, 0.95, 1.1, fl),
		// worse than round-robin at p99
		targetCell("worse", 0.7, 0.5, 0.2, 0.09, 0.3, 0.1, 0.25, 0.95, 1.1, fl),
	}}
	ts := rep.Targets(Policies[0].Name)
	got := map[string]string{}
	for _, tg := range ts {
		var ms []string
		for _, m := range tg.Misses {
			ms = append(ms, m.Cell)
		}
		got[tg.Name] = strings.Join(append([]string{strconv.Itoa(tg.Met) + "/" + strconv.Itoa(tg.Cells) + " out " + strconv.Itoa(tg.OutOfReach)}, ms...), " ")
	}
	want := map[string]string{
		"TTFT p50 never worse":                         "7/7 out 0",
		"TTFT p99 never worse":                         "6/7 out 0 worse/4096/70%",
		"3x at p50 and p99, load >= 100%":              "1/5 out 3 floor/4096/100% overload/4096/130% reach/4096/130% half/4096/100%",
		"hit rate >= 90% of the ceiling, load <= 100%": "4/5 out 0 floor/4096/100%",
		"imbalance <= 1.3, prefill tokens":             "6/7 out 0 reach/4096/130%",
		"imbalance <= 1.3, prompt tokens":              "6/7 out 0 reach/4096/130%",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	why := map[string]string{}
	for _, m := range ts[2].Misses {
		why[m.Cell] = m.Why
	}
	for cell, frag := range map[string]string{
		"floor/4096/100%":    "p50 0.90x: out of reach, the floor 0.080 s is over 0.067 s",
		"overload/4096/130%": "load >= 1.18 with the pooled ceiling, round-robin's 1.24: a fluid queue gains at most 1.3x",
		"reach/4096/130%":    "p50 0.67x: within reach",
	} {
		if !strings.Contains(why[cell], frag) {
			t.Errorf("%s: %q lacks %q", cell, why[cell], frag)
		}
	}
	var b strings.Builder
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{"Targets, kvrouter against round-robin:", "| 3x at p50 and p99, load >= 100% | 1/5 | 3 |", "- worse/4096/70%: p99 1.200x"} {
		if !strings.Contains(b.String(), frag) {
			t.Errorf("markdown lacks %q:\n%s", frag, b.String())
		}
	}
}

// TestReadJSON: a written report reads back whole; a file that is not a
// sweep report is refused by name.
func TestReadJSON(t *testing.T) {
	dir := t.TempDir()
	fl := &stats.Summary{P50: 80 * time.Millisecond, P99: 150 * time.Millisecond}
	rep := &Report{Policies: Policies, Baseline: Baseline, Cells: []Cell{targetCell("a", 1, 0.5, 0.2, 0.3, 1, 1, 4, 0.95, 1.1, fl)}}
	path := filepath.Join(dir, "sweep.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Cells[0].TTFTFloor.P99 != fl.P99 || back.Cells[0].PrefillShare != 0.9 || back.Cells[0].Results[1].TTFT.P99 != 4*time.Second {
		t.Fatalf("read back %+v", back.Cells[0])
	}
	other := filepath.Join(dir, "other.json")
	if err := os.WriteFile(other, []byte(`{"policies": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadJSON(other); !errors.Is(err, ErrNotReport) || !strings.Contains(err.Error(), other) {
		t.Fatalf("not a report: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"cells": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadJSON(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("truncated: %v", err)
	}
}
