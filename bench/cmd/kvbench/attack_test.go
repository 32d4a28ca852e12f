package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/attack"
)

// TestAttackShort runs `kvbench attack --short` against a router built from
// this tree and asserts every attack's verdict against the bar.
func TestAttackShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a router and runs every attack for about 30 s")
	}
	bin := buildRouter(t)
	cfg, _, _, err := parseAttack([]string{"--short", "--router-bin", bin})
	if err != nil {
		t.Fatal(err)
	}
	// A shared CI machine stretches every latency: they are reported,
	// not judged, and the harness waits longer for the router.
	cfg.Untimed = true
	var progress bytes.Buffer
	cfg.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := attack.Run(ctx, cfg)
	var table bytes.Buffer
	if rep != nil {
		writeAttackTable(&table, rep)
	}
	t.Logf("progress:\n%s\n%s", progress.String(), table.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(attack.Names()) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(attack.Names()))
	}
	for _, r := range rep.Results {
		if !r.Pass {
			t.Errorf("%s: FAIL: %v", r.Name, r.Failures)
		}
	}
}
