package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
)

// syncBuffer is a log the App writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testConfig is a router on listeners the test bound, with a state dir of
// the test's and no catch-up wait.
func testConfig(t *testing.T) (Config, *syncBuffer) {
	cfg := DefaultConfig()
	cfg.Persist.StateDir = t.TempDir()
	cfg.CatchUpWait = 0
	cfg.GRPCListener, cfg.HTTPListener = listen(t), listen(t)
	log := &syncBuffer{}
	cfg.LogOutput = log
	return cfg, log
}

// waitServing watches the App's overall health until it is SERVING.
func waitServing(t *testing.T, cc *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := w.Recv()
		if err != nil {
			t.Fatalf("never SERVING: %v", err)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAppExtensionPoints: a Module registers an HTTP handler, a listener
// of its own and a hook per phase; the hooks run in phase order, the
// Registrar is there from PhaseStarted, and a worker it registers from
// discovery is listed beside the config file's with its source; the
// metrics carry kvrouter_build_info; at ctx's end Run drains every
// listener, stops App.Go's goroutines and writes the shutdown snapshot.
func TestAppExtensionPoints(t *testing.T) {
	cfg, log := testConfig(t)
	cfg.Workers = []WorkerConfig{{WorkerID: "file-0", Model: "m", Endpoint: "h:1"}}
	var mu sync.Mutex
	var phases []string
	note := func(s string) { mu.Lock(); phases = append(phases, s); mu.Unlock() }
	extra := listen(t)
	bgStopped := make(chan struct{})
	cfg.Modules = []Module{func(a *App) error {
		a.Mux().HandleFunc("/ext", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "status page") })
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "extra") })}
		a.AddListener(Listener{Name: "extra", Listener: extra, Serve: srv.Serve, Shutdown: srv.Shutdown})
		a.OnPhase(PhaseListening, func(context.Context) error {
			if a.Registrar() != nil {
				t.Error("Registrar set before PhaseStarted")
			}
			note("listening")
			return nil
		})
		a.OnPhase(PhaseStarted, func(ctx context.Context) error {
			note("started")
			a.Go(func(ctx context.Context) { <-ctx.Done(); close(bgStopped) })
			return a.Registrar().Upsert(ctx, &kvrouterv1.Worker{WorkerId: "pod-0", Model: "m", Endpoint: "10.0.0.1:8000"}, string(fleet.SourceDiscovery))
		})
		a.OnPhase(PhaseServing, func(context.Context) error { note("serving"); return nil })
		return nil
	}}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()

	cc, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	waitServing(t, cc)
	lw, err := kvrouterv1.NewRegistryClient(cc).ListWorkers(ctx, &kvrouterv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range lw.GetWorkers() {
		got = append(got, w.GetWorker().GetWorkerId()+"/"+w.GetSource())
	}
	if strings.Join(got, " ") != "file-0/config pod-0/discovery" {
		t.Fatalf("workers %v; want file-0/config pod-0/discovery", got)
	}
	if code, body := httpGet(t, "http://"+a.HTTPAddr()+"/ext"); code != 200 || body != "status page" {
		t.Fatalf("/status: %d %q", code, body)
	}
	if code, body := httpGet(t, "http://"+extra.Addr().String()+"/"); code != 200 || body != "extra" {
		t.Fatalf("extra listener: %d %q", code, body)
	}
	_, metrics := httpGet(t, "http://"+a.HTTPAddr()+"/metrics")
	if !strings.Contains(metrics, `kvrouter_build_info{goversion="go`) || !strings.Contains(metrics, `version="`+BuildVersion().Version+`"} 1`) {
		t.Fatalf("no kvrouter_build_info in /metrics:\n%s", metrics)
	}

	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	<-bgStopped
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(phases, ",") != "listening,started,serving" {
		t.Fatalf("phases %v", phases)
	}
	if _, err := net.Dial("tcp", extra.Addr().String()); err == nil {
		t.Fatal("the extra listener still accepts after Run")
	}
	snaps, _ := filepath.Glob(filepath.Join(cfg.Persist.StateDir, "snapshot-*.kvs"))
	if len(snaps) != 1 || !strings.Contains(log.String(), "shutdown snapshot written") {
		t.Fatalf("snapshots %v after Run; log:\n%s", snaps, log)
	}
}

// TestAppStartFails: a hook's error stops the start-up and is Run's, and
// what the App took is released (the state dir can be opened again); a
// Module's error fails New and closes the listeners handed over.
func TestAppStartFails(t *testing.T) {
	cfg, _ := testConfig(t)
	boom := errors.New("tokenizer file missing")
	cfg.Modules = []Module{func(a *App) error {
		a.OnPhase(PhaseListening, func(context.Context) error { return boom })
		return nil
	}}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Run: %v; want the hook's error", err)
	}
	cfg2, _ := testConfig(t)
	cfg2.Persist.StateDir = cfg.Persist.StateDir
	cfg2.Modules = []Module{func(*App) error { return boom }}
	if _, err := New(cfg2); !errors.Is(err, boom) {
		t.Fatalf("New with a failing module: %v; want its error (and the state dir unlocked)", err)
	}
	for _, l := range []net.Listener{cfg2.GRPCListener, cfg2.HTTPListener} {
		if _, err := l.Accept(); err == nil || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("handed-over listener after New failed: %v; want closed", err)
		}
	}
}

// TestAppConfigWorkerInvalid: a config file worker the fleet refuses fails
// the start, naming the entry and the field.
func TestAppConfigWorkerInvalid(t *testing.T) {
	cfg, _ := testConfig(t)
	cfg.Workers = []WorkerConfig{{WorkerID: "w", Model: "m", Endpoint: "nohostport"}}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background())
	if !errors.Is(err, fleet.ErrInvalid) || !strings.Contains(err.Error(), "workers[0]") || !strings.Contains(err.Error(), "worker.endpoint") {
		t.Fatalf("Run: %v; want ErrInvalid naming workers[0] and worker.endpoint", err)
	}
}

// TestListenInherited: "fd:N" takes the listening socket at descriptor N
// (here one this process holds, as a child holds what its parent handed
// over); a bad N or a descriptor that is no socket is an error naming the
// address.
func TestListenInherited(t *testing.T) {
	l := listen(t)
	defer l.Close()
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Listen owns (and closes) the descriptor it is given: give it a
	// duplicate, or f's finalizer closes the number again later, when a
	// later test's socket may have it.
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Listen(fmt.Sprintf("fd:%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Addr().String() != l.Addr().String() {
		t.Fatalf("inherited listener on %s, want %s", got.Addr(), l.Addr())
	}
	go func() {
		if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
			c.Close()
		}
	}()
	if c, err := got.Accept(); err != nil {
		t.Fatalf("accept on the inherited listener: %v", err)
	} else {
		c.Close()
	}
	notSock, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer notSock.Close()
	dup, err := syscall.Dup(int(notSock.Fd())) // Listen owns (and closes) the descriptor it is given
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"fd:x", "fd:1", fmt.Sprintf("fd:%d", dup)} {
		if _, err := Listen(addr); err == nil || !strings.Contains(err.Error(), addr) {
			t.Errorf("Listen(%q): %v; want an error naming it", addr, err)
		}
	}
}
