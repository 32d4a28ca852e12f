package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

func listWorkers(t *testing.T, r *router) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lw, err := kvrouterv1.NewRegistryClient(dial(t, r.grpcAddr)).ListWorkers(ctx, &kvrouterv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, w := range lw.GetWorkers() {
		out[w.GetWorker().GetWorkerId()] = w.GetSource()
	}
	return out
}

func writeConfig(t *testing.T, dir, name string, ids ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("workers:\n")
	for _, id := range ids {
		b.WriteString("  - worker_id: " + id + "\n    model: m\n")
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRestartKeepsRegistry: a registration that returned OK survives a
// kill -9 the instant after; the config file wins for the ids it names and
// drops the ones it no longer names, API registrations stay.
func TestRestartKeepsRegistry(t *testing.T) {
	dir, stateDir := t.TempDir(), t.TempDir()
	r := startRouter(t, "--state-dir", stateDir, "--config", writeConfig(t, dir, "a.yaml", "static-1", "shared"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := kvrouterv1.NewRegistryClient(dial(t, r.grpcAddr))
	if _, err := reg.RegisterWorker(ctx, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: "api-1", Model: "m"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.UnregisterWorker(ctx, &kvrouterv1.UnregisterWorkerRequest{WorkerId: "shared"}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.RegisterWorker(ctx, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: "shared", Model: "m"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-r.exited

	r = startRouter(t, "--state-dir", stateDir, "--config", writeConfig(t, dir, "b.yaml", "static-2", "shared"))
	got := listWorkers(t, r)
	want := map[string]string{"api-1": "api", "static-2": "config", "shared": "config"}
	if len(got) != len(want) {
		t.Fatalf("after kill -9 and restart: workers %v, want %v", got, want)
	}
	for id, src := range want {
		if got[id] != src {
			t.Fatalf("after kill -9 and restart: workers %v, want %v", got, want)
		}
	}
}

// TestStateDirLocked: a second router on the same state dir refuses to
// start, naming the directory.
func TestStateDirLocked(t *testing.T) {
	stateDir := t.TempDir()
	startRouter(t, "--state-dir", stateDir)
	out, err := exec.Command(binary, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--state-dir", stateDir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), stateDir) || !strings.Contains(string(out), "another router holds it") {
		t.Fatalf("second router on %s: err=%v output=%s; want a refusal naming the dir", stateDir, err, out)
	}
}

// TestShutdownSnapshot: SIGTERM leaves a snapshot in the state dir.
func TestShutdownSnapshot(t *testing.T) {
	stateDir := t.TempDir()
	r := startRouter(t, "--state-dir", stateDir)
	checkSIGTERMDrains(t, r)
	names, err := filepath.Glob(filepath.Join(stateDir, "snapshot-*.kvs"))
	if err != nil || len(names) != 1 {
		t.Fatalf("snapshots after SIGTERM: %v (%v), want one", names, err)
	}
	entries, _ := os.ReadDir(stateDir)
	var all []string
	for _, e := range entries {
		all = append(all, e.Name())
	}
	if !slices.Contains(all, "registry.log") {
		t.Fatalf("state dir holds %v, want registry.log too", all)
	}
}
