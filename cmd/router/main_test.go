package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvrouter-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "kvrouter")
	out, err := exec.Command("go", "build", "-race", "-o", binary, ".").CombinedOutput()
	if err != nil {
		os.Stderr.Write(out)
		panic("build kvrouter: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// router is a running kvrouter process.
type router struct {
	cmd        *exec.Cmd
	grpcAddr   string
	httpAddr   string
	exited     chan error
	stderrTail *strings.Builder
	logMu      sync.Mutex // guards stderrTail for logs
}

// logs is what the router has logged so far.
func (r *router) logs() string {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	return r.stderrTail.String()
}

// waitLogs returns the router's log once it holds every one of wants, or
// as it is after a minute. A line the router wrote before an event the test saw
// (health SERVING, say) reaches logs only when the goroutine reading its
// stderr has read it.
func waitLogs(r *router, wants ...string) string {
	deadline := time.Now().Add(time.Minute)
	for {
		logs := r.logs()
		missing := false
		for _, w := range wants {
			if !strings.Contains(logs, w) {
				missing = true
			}
		}
		if !missing || time.Now().After(deadline) {
			return logs
		}
		time.Sleep(2 * time.Millisecond) // polling the reader's progress
	}
}

// startRouter starts the binary on free loopback ports (and a state dir of
// the test's unless args name one), waits for its "kvrouter listening" log
// line, which names the bound addresses, then for health SERVING.
func startRouter(t *testing.T, args ...string) *router {
	t.Helper()
	r := launchRouter(t, args...)
	waitServing(t, r)
	return r
}

func launchRouter(t *testing.T, args ...string) *router {
	t.Helper()
	if !slices.Contains(args, "--state-dir") {
		args = append(args, "--state-dir", t.TempDir())
	}
	args = append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json"}, args...)
	cmd := exec.Command(binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &router{cmd: cmd, exited: make(chan error, 1), stderrTail: &strings.Builder{}}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			r.logMu.Lock()
			r.stderrTail.WriteString(line + "\n")
			r.logMu.Unlock()
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "kvrouter listening" {
				r.grpcAddr, _ = rec["grpc"].(string)
				r.httpAddr, _ = rec["http"].(string)
				close(ready)
			}
		}
		r.exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case <-ready:
	case err := <-r.exited:
		t.Fatalf("router exited before listening: %v\n%s", err, r.stderrTail)
	case <-time.After(90 * time.Second):
		t.Fatalf("router did not start in 90s")
	}
	return r
}

// waitServing watches the router's overall health until it is SERVING.
func waitServing(t *testing.T, r *router) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(dial(t, r.grpcAddr)).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := w.Recv()
		if err != nil {
			t.Fatalf("router never reported SERVING: %v\n%s", err, r.stderrTail)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
	}
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestBinaryServesContract runs the binary and checks each part of what it
// serves in turn, ending with a SIGTERM drain.
func TestBinaryServesContract(t *testing.T) {
	r := startRouter(t)
	cc := dial(t, r.grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	checkReflection(ctx, t, cc)
	checkHealth(ctx, t, cc, r.httpAddr)
	checkRegistry(ctx, t, cc)
	checkMetrics(t, r.httpAddr)
	checkSIGTERMDrains(t, r)
}

// checkReflection checks reflection lists both services. The stream ends
// with the check: left open, it would hold the SIGTERM drain that follows
// for the whole --drain-timeout.
func checkReflection(ctx context.Context, t *testing.T, cc *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	services := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		services[s.GetName()] = true
	}
	for _, want := range []string{"kvrouter.v1.Router", "kvrouter.v1.Registry", "grpc.health.v1.Health"} {
		if !services[want] {
			t.Errorf("reflection does not list %s (got %v)", want, services)
		}
	}
}

// checkHealth checks health answers SERVING, over gRPC and over HTTP.
func checkHealth(ctx context.Context, t *testing.T, cc *grpc.ClientConn, httpAddr string) {
	t.Helper()
	hc, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "kvrouter.v1.Router"})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", hc.GetStatus(), err)
	}
	hr, err := http.Get("http://" + httpAddr + "/healthz")
	if err != nil || hr.StatusCode != http.StatusOK {
		t.Fatalf("/healthz = %v, %v", hr, err)
	}
	hr.Body.Close()
}

// checkRegistry checks a RegisterWorker / ListWorkers round-trip (a worker
// without events: approximate mode), and that bad registrations get
// InvalidArgument naming the field.
func checkRegistry(ctx context.Context, t *testing.T, cc *grpc.ClientConn) {
	t.Helper()
	reg := kvrouterv1.NewRegistryClient(cc)
	w := &kvrouterv1.Worker{WorkerId: "w1", Model: "m", Endpoint: "10.0.0.1:8000", DpSize: 2}
	if _, err := reg.RegisterWorker(ctx, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
		t.Fatal(err)
	}
	lw, err := reg.ListWorkers(ctx, &kvrouterv1.ListWorkersRequest{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(lw.GetWorkers()); n != 2 {
		t.Fatalf("ListWorkers returned %d ranks, want 2: %v", n, lw)
	}
	for i, ws := range lw.GetWorkers() {
		if ws.GetWorker().GetWorkerId() != "w1" || ws.GetDpRank() != uint32(i) || ws.GetWorker().GetEndpoint() != "10.0.0.1:8000" {
			t.Errorf("rank %d: %v", i, ws)
		}
	}
	if lw, _ := reg.ListWorkers(ctx, &kvrouterv1.ListWorkersRequest{Model: "other"}); len(lw.GetWorkers()) != 0 {
		t.Errorf("ListWorkers(other) = %v, want none", lw)
	}

	for _, tc := range []struct {
		w     *kvrouterv1.Worker
		field string
	}{
		{&kvrouterv1.Worker{WorkerId: "w1", Model: "m"}, "worker_id"},
		{&kvrouterv1.Worker{WorkerId: "w2"}, "model"},
		{&kvrouterv1.Worker{WorkerId: "w3", Model: "m", KvEventsEndpoint: "not an endpoint"}, "kv_events_endpoint"},
		{&kvrouterv1.Worker{WorkerId: "w4", Model: "m", Endpoint: "::::"}, "endpoint"},
	} {
		_, err := reg.RegisterWorker(ctx, &kvrouterv1.RegisterWorkerRequest{Worker: tc.w})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("RegisterWorker(%v) = %v; want InvalidArgument naming %s", tc.w, err, tc.field)
		}
	}
}

// checkMetrics checks metrics are served.
func checkMetrics(t *testing.T, httpAddr string) {
	t.Helper()
	mr, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mr.Body)
	mr.Body.Close()
	if !strings.Contains(string(body), "kvrouter_rpc_duration_seconds") {
		t.Errorf("/metrics lacks kvrouter_rpc_duration_seconds")
	}
}

// checkSIGTERMDrains checks SIGTERM drains and exits 0.
func checkSIGTERMDrains(t *testing.T, r *router) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, r.stderrTail)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("router did not exit within 20s of SIGTERM")
	}
}

func TestBinaryConfigFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("block_size: 32\nworkers:\n  - worker_id: static-1\n    model: m\n    dp_size: 1\n"), 0o644)
	r := startRouter(t, "--config", good)
	cc := dial(t, r.grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lw, err := kvrouterv1.NewRegistryClient(cc).ListWorkers(ctx, &kvrouterv1.ListWorkersRequest{})
	if err != nil || len(lw.GetWorkers()) != 1 || lw.GetWorkers()[0].GetWorker().GetWorkerId() != "static-1" {
		t.Fatalf("static worker not registered: %v %v", lw, err)
	}
	sr, err := kvrouterv1.NewRouterClient(cc).Score(ctx, &kvrouterv1.ScoreRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: make([]uint32, 70)}})
	if err != nil || sr.GetBlockSize() != 32 || sr.GetPromptBlocks() != 2 {
		t.Fatalf("Score with block_size 32 from the file = %v, %v; want block_size 32, 2 blocks", sr, err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("grpc_addr: 127.0.0.1:0\nblock_sise: 16\n"), 0o644)
	out, err := exec.Command(binary, "--config", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "block_sise") {
		t.Fatalf("unknown key: err=%v output=%s; want a failure naming block_sise", err, out)
	}
}

func TestFlagsOverrideFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte("block_size: 32\nprefill_weight: 3\n"), 0o644)
	cfg, err := loadConfig([]string{"--config", path, "--block-size", "64"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Scoring.BlockSize != 64 || cfg.Scoring.PrefillWeight != 3 || cfg.GRPCAddr != ":50051" {
		t.Fatalf("got block_size %d prefill_weight %v grpc_addr %q; want 64 (flag), 3 (file), :50051 (default)", cfg.Scoring.BlockSize, cfg.Scoring.PrefillWeight, cfg.GRPCAddr)
	}
	if _, err := loadConfig([]string{"--tier-weights", "1,2"}, io.Discard); err == nil {
		t.Fatal("--tier-weights with two values accepted")
	}
}
