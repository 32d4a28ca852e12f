package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/restart"
)

// TestRestartShort runs `kvbench restart --short` against a router built from
// this tree: kill -9 mid-replay, restart on the state dir, and every check of
// the scenario must pass. A router without --state-dir yet gets the baseline
// instead (no state, the fleet registered again), which checks the wiring and
// the exactness checks, and the test is skipped.
func TestRestartShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a router and four engines for about 20 s")
	}
	bin := buildRouter(t)
	supported := harness.RouterHasFlag(bin, "state-dir")
	args := []string{"--short", "--router-bin", bin}
	if !supported {
		args = append(args, "--no-state", "--reregister")
	}
	var out, progress bytes.Buffer
	cfg, err := parseRestart(args, &progress)
	if err != nil {
		t.Fatal(err)
	}
	cfg.WorkRoot = t.TempDir()
	cfg.Out, cfg.Progress = &out, &progress
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute) // a hang guard, sized for a loaded machine
	defer cancel()
	res, err := restart.Run(ctx, cfg)
	t.Logf("progress:\n%s\nreport:\n%s", progress.String(), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if supported {
		if len(res.Failures) > 0 {
			t.Fatalf("%d check(s) failed:\n%s", len(res.Failures), strings.Join(res.Failures, "\n"))
		}
		return
	}
	// Baseline: the registry was sent again, every engine with its whole
	// history replayed it, and engine-00's 16-batch buffer could not.
	if !res.Serving || res.CatchUp == nil || len(res.CatchUp.Registry) > 0 {
		t.Fatalf("baseline: serving %v, registry %v", res.Serving, res.CatchUp)
	}
	for i, rc := range res.CatchUp.Ranks {
		if want := i > 0; rc.Exact() != want {
			t.Errorf("baseline: %s exact %v, want %v: %s", rc.Worker, rc.Exact(), want, rc.Reason())
		}
	}
	t.Skip("the router has no --state-dir yet: wiring and checks verified against the no-state baseline")
}

// buildRouter builds ./cmd/router of this module into the test's temp dir,
// or returns $KVBENCH_ROUTER_BIN when set (a binary built elsewhere).
func buildRouter(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("KVBENCH_ROUTER_BIN"); bin != "" {
		return bin
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	bin := filepath.Join(t.TempDir(), "kvrouter")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/router")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/router: %v\n%s", err, out)
	}
	return bin
}
