package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
)

// TestCompareReplicasShort runs `kvbench compare --short --replicas 2` through
// the replica gateway against routers built from this tree, killing replica 0
// halfway: in cluster mode (an embedded NATS server) and as the ablation
// (independent routers). A router without --nats-url gets the ablation only,
// which checks the gateway and the failover path, and the test is skipped.
func TestCompareReplicasShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts routers and 16 engines for about 15 s")
	}
	bin := buildRouter(t)
	cluster := harness.RouterHasFlag(bin, "nats-url")
	syncFlag := "--sync=both"
	if !cluster {
		syncFlag = "--sync=false"
	}
	run, rep := runShortCompare(t, "--short", "--router-bin", bin, "--replicas", "2", syncFlag,
		"--kill-replica-at", "50%", "--kill-replica", "0")
	want := 2
	if !cluster {
		want = 1
	}
	if len(rep.Results) != want {
		t.Fatalf("%d runs, want %d", len(rep.Results), want)
	}
	for i := range rep.Results {
		checkReplicaRun(t, &rep.Results[i], len(run.cfg.Requests))
	}
	if !cluster {
		t.Skip("the router has no --nats-url yet: the gateway and failover verified on independent routers only")
	}
}

// runShortCompare parses args as kvbench compare's and runs the comparison,
// logging its progress and table; it fails the test on an error.
func runShortCompare(t *testing.T, args ...string) (compareRun, *replay.Report) {
	t.Helper()
	run, err := parseCompare(args)
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	run.cfg.Progress = &progress
	run.cfg.OutDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute) // a hang guard, sized for a loaded machine
	defer cancel()
	rep, err := replay.Compare(ctx, run.cfg)
	var table bytes.Buffer
	if rep != nil {
		rep.WriteTable(&table)
	}
	t.Logf("progress:\n%s\n%s", progress.String(), table.String())
	if err != nil {
		t.Fatal(err)
	}
	return run, rep
}

func checkReplicaRun(t *testing.T, r *replay.PolicyResult, requests int) {
	t.Helper()
	name := r.Label()
	if r.Replicas != 2 || r.Requests != requests || r.TTFT.N != requests {
		t.Errorf("%s: %d replicas, %d requests, %d TTFTs; want 2, %d, %d", name, r.Replicas, r.Requests, r.TTFT.N, requests, requests)
	}
	g, f := r.Gateway, r.Failover
	if g == nil || f == nil || r.Split == nil {
		t.Fatalf("%s: gateway %v, failover %v, split %v: want all three", name, g, f, r.Split)
	}
	// Every Route answered: the ones in flight at the kill were retried.
	if g.RoutesFailed != 0 || r.ChooseErrors != 0 || g.Routes != int64(requests) {
		t.Errorf("%s: %d of %d Routes failed (%d choose errors): %s", name, g.RoutesFailed, g.Routes, r.ChooseErrors, r.FirstError)
	}
	if f.Replica != 0 || f.AtRequest != requests/2 {
		t.Errorf("%s: killed replica %d at request %d, want 0 at %d", name, f.Replica, f.AtRequest, requests/2)
	}
	if f.After.RoutesPerReplica[0] != 0 || f.After.RoutesPerReplica[1] == 0 {
		t.Errorf("%s: Routes per replica after the kill %v, want none on the dead one", name, f.After.RoutesPerReplica)
	}
	// Replica 0 answers its round-robin turns among the Routes before the
	// kill, less those still being dispatched when it dies (a loaded
	// machine puts the dispatcher behind, up to its concurrency): they are
	// retried on replica 1.
	share, late := int64(requests/4), int64(replay.DefaultConcurrency/2)
	if before := g.RoutesPerReplica[0] - f.After.RoutesPerReplica[0]; before < share-late {
		t.Errorf("%s: replica 0 answered %d Routes before the kill, want about %d (at least %d)", name, before, share, share-late)
	}
	if r.RouterCPUPerRoute <= 0 {
		t.Errorf("%s: router CPU per Route %v", name, r.RouterCPUPerRoute)
	}
	if r.Diverted < 0 || r.Diverted > 1 {
		t.Errorf("%s: a share %v of the Routes diverted by the guard", name, r.Diverted)
	}
	if r.Sync {
		if r.NATS == nil || r.NATSMsgsPerRoute <= 0 || r.NATSBytesPerRoute <= 0 || r.LoadMsgsPerRoute <= 0 {
			t.Errorf("%s: NATS traffic %+v, published %v: the replicas did not sync over the server", name, r.NATS, r.NATSPublished)
		}
		if g.MarksNotFound != 0 {
			t.Errorf("%s: %d marks NotFound: a replica did not know a request another routed", name, g.MarksNotFound)
		}
		// Every request was finished on some replica, most on another than
		// their Route's: the survivor must hold none.
		if len(r.ActiveAfter) != 2 || r.ActiveAfter[0] != -1 || r.ActiveAfter[1] != 0 {
			t.Errorf("%s: active requests after the run %v, want [dead 0]", name, r.ActiveAfter)
		}
		if g.MarksFailed != 0 {
			t.Errorf("%s: %d marks failed: %s", name, g.MarksFailed, r.FirstError)
		}
		return
	}
	// Independent routers do not know each other's requests: marks that
	// reach the other replica are NotFound, which is what the sync exists
	// to fix.
	if r.NATS != nil || g.MarksNotFound == 0 || len(r.ActiveAfter) != 2 || r.ActiveAfter[1] <= 0 {
		t.Errorf("%s: NATS %v, %d marks NotFound, active after %v: want no NATS, some NotFound and requests left active",
			name, r.NATS, g.MarksNotFound, r.ActiveAfter)
	}
}

func TestCompareFlags(t *testing.T) {
	for in, want := range map[string]float64{"50%": 0.5, "0.25": 0.25, "99.5%": 0.995} {
		if got, err := parseFraction(in); err != nil || got != want {
			t.Errorf("parseFraction(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "100%", "1", "-5%", "half", ""} {
		if _, err := parseFraction(in); err == nil {
			t.Errorf("parseFraction(%q): no error", in)
		}
	}
	run, err := parseCompare([]string{"--short", "--replicas", "1,3", "--sync", "both", "--kill-replica-at", "40%"})
	if err != nil {
		t.Fatal(err)
	}
	c := run.cfg
	if len(c.Requests) != 300 || len(c.Policies) != 1 || c.Policies[0] != replay.PolicyKV ||
		len(c.Replicas) != 2 || c.Replicas[1] != 3 || len(c.Sync) != 2 || !c.Sync[0] || c.Sync[1] || c.KillAt != 0.4 {
		t.Fatalf("parsed %d requests, policies %v, replicas %v, sync %v, kill at %v", len(c.Requests), c.Policies, c.Replicas, c.Sync, c.KillAt)
	}
	if run, err = parseCompare([]string{"--short", "--sync=false"}); err != nil || len(run.cfg.Sync) != 1 || run.cfg.Sync[0] {
		t.Fatalf("--sync=false: %v, %v", run.cfg.Sync, err)
	}
	for _, bad := range [][]string{
		{"--short", "--kill-replica-at", "50%"}, // needs --replicas
		{"--short", "--replicas", "0"},
		{"--short", "--sync", "maybe"},
	} {
		if _, err := parseCompare(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestCompareLockstepShort replays the short slice in lockstep on the vLLM
// model against a router and two synced replicas built from this tree, one
// of them killed halfway: every Route is answered, every wait for the
// routers to apply the engines' batches ends with them applied (ListWorkers'
// last_seq), but for the one wait the killed replica fails and is not
// waited for again, and the clock is held while they catch up. The old
// engine model refuses the flag.
func TestCompareLockstepShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts routers and 16 engines for about 10 s")
	}
	for _, flag := range []string{"--lockstep", "--request-log"} {
		if _, err := parseCompare([]string{"--short", flag}); err == nil {
			t.Fatalf("%s on the old engine model: no error", flag)
		}
	}
	bin := buildRouter(t)
	run, rep := runShortCompare(t, "--short", "--router-bin", bin, "--engine-model", "vllm", "--capacity", "16384", "--lockstep",
		"--replicas", "1,2", "--kill-replica-at", "50%", "--request-log")
	if !rep.Lockstep || len(rep.Results) != 2 {
		t.Fatalf("lockstep %v, %d runs; want true, 2", rep.Lockstep, len(rep.Results))
	}
	for _, r := range rep.Results {
		n := len(run.cfg.Requests)
		t.Logf("%s: %d unsettled, paused %.2fs of %.2fs, failover %v", r.Label(), r.Unsettled, r.PausedSeconds, r.WallSeconds, r.Failover != nil)
		if r.TTFT.N != n || r.ChooseErrors != 0 || r.MarkErrors != 0 || r.Unsettled > int64(r.Replicas-1) || r.PausedSeconds <= 0 {
			t.Errorf("%s: %d of %d TTFTs, %d choose and %d mark errors, %d unsettled, paused %vs (%s)",
				r.Label(), r.TTFT.N, n, r.ChooseErrors, r.MarkErrors, r.Unsettled, r.PausedSeconds, r.FirstError)
		}
	}
	files, _ := filepath.Glob(filepath.Join(run.cfg.OutDir, "requests-*.jsonl"))
	if len(files) != len(rep.Results) {
		t.Fatalf("--request-log wrote %v, want a file per run", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || bytes.Count(b, []byte("\n")) != len(run.cfg.Requests) {
			t.Errorf("%s: %d lines (%v), want %d", f, bytes.Count(b, []byte("\n")), err, len(run.cfg.Requests))
		}
	}
}
