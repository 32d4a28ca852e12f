package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/sweep"
)

// TestSweepShort runs `kvbench sweep --short` against a freshly built router
// and checks the matrix's structure, not its figures.
func TestSweepShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the router and a fleet")
	}
	bin := buildRouter(t)
	out := t.TempDir()
	var progress bytes.Buffer
	cfg, dir, err := parseSweep([]string{"--short", "--router-bin", bin, "--out", out}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Traces) != 2 || len(cfg.Capacities) != 1 || len(cfg.Loads) != 2 {
		t.Fatalf("short matrix: %d traces x %d capacities x %d loads, want 2 x 1 x 2", len(cfg.Traces), len(cfg.Capacities), len(cfg.Loads))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // a hang guard, sized for a loaded machine
	defer cancel()
	t0 := time.Now()
	rep, err := sweep.Run(ctx, cfg)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sweep took %v", time.Since(t0))
	paths, err := writeSweep(rep, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: missing or empty (%v)", p, err)
		}
	}
	md, _ := os.ReadFile(paths[0])
	t.Logf("table:\n%s", md)
	if !strings.Contains(string(md), "Targets, kvrouter against round-robin:") {
		t.Errorf("sweep.md has no targets")
	}
	var again bytes.Buffer // kvbench report renders the same from sweep.json
	if err := runReport([]string{paths[1]}, &again); err != nil {
		t.Fatal(err)
	}
	if again.String() != string(md) {
		t.Errorf("kvbench report %s differs from sweep.md:\n%s", paths[1], again.String())
	}

	if want := len(cfg.Traces) * len(cfg.Capacities) * len(cfg.Loads); len(rep.Cells) != want {
		t.Fatalf("%d cells, want %d", len(rep.Cells), want)
	}
	seen := map[string]bool{}
	for i := range rep.Cells {
		c := &rep.Cells[i]
		seen[c.Name()] = true
		if !(c.PooledCeiling > 0 && c.PooledCeiling <= 1) {
			t.Errorf("%s: pooled ceiling %v", c.Name(), c.PooledCeiling)
		}
		if !strings.Contains(string(md), "| "+c.Trace+" | ") {
			t.Errorf("table has no row for %s", c.Trace)
		}
		for _, p := range cfg.Policies {
			r, ok := c.Result(p.Name)
			if !ok {
				t.Errorf("%s: no result for %s", c.Name(), p.Name)
				continue
			}
			if r.Requests != c.Requests || r.TTFT.N != c.Requests {
				t.Errorf("%s %s: %d requests, %d TTFTs, want %d", c.Name(), p.Name, r.Requests, r.TTFT.N, c.Requests)
			}
			for name, v := range map[string]float64{"p50 ratio": r.TTFTP50Ratio, "p99 ratio": r.TTFTP99Ratio, "of ceiling": r.HitRateOfCeiling, "imbalance": r.Imbalance} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
					t.Errorf("%s %s: %s = %v, want finite and positive", c.Name(), p.Name, name, v)
				}
			}
			if p.Name == sweep.Baseline && (r.TTFTP50Ratio != 1 || r.TTFTP99Ratio != 1) {
				t.Errorf("%s: baseline ratios %v, %v, want 1", c.Name(), r.TTFTP50Ratio, r.TTFTP99Ratio)
			}
			if r.ChooseErrors != 0 {
				t.Errorf("%s %s: %d choose errors (%s)", c.Name(), p.Name, r.ChooseErrors, r.FirstError)
			}
		}
	}
	for _, tr := range cfg.Traces {
		for _, c := range cfg.Capacities {
			for _, l := range cfg.Loads {
				n := (&sweep.Cell{Trace: tr.Name, Capacity: c, Load: l}).Name()
				if !seen[n] {
					t.Errorf("cell %s missing", n)
				}
			}
		}
	}
}

// TestReportArgs: kvbench report takes exactly one sweep.json and names a
// file that is not one.
func TestReportArgs(t *testing.T) {
	var out bytes.Buffer
	if err := runReport(nil, &out); err == nil {
		t.Fatal("no file: no error")
	}
	p := t.TempDir() + "/x.json"
	if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runReport([]string{p}, &out); !errors.Is(err, sweep.ErrNotReport) {
		t.Fatalf("empty report: %v", err)
	}
}
