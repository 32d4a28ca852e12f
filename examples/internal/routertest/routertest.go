// Package routertest runs what the examples' tests need: a real kvrouter
// (internal/app, as cmd/router runs it) on loopback ports, and an engine
// stand-in that speaks just enough of the OpenAI streaming API for a
// gateway to dispatch to and records the headers it was sent.
package routertest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/app"
)

// Router is a running kvrouter.
type Router struct {
	GRPCAddr, HTTPAddr string
	Conn               *grpc.ClientConn
}

// Start runs a router with a state dir of the test's until the test ends
// and returns once it is SERVING.
func Start(t testing.TB) *Router {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.Persist.StateDir = t.TempDir()
	cfg.CatchUpWait = 0
	cfg.LogOutput = io.Discard
	cfg.GRPCListener, cfg.HTTPListener = listen(t), listen(t)
	a, err := app.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
		a.Close()
	})
	r := &Router{GRPCAddr: a.GRPCAddr(), HTTPAddr: a.HTTPAddr()}
	r.Conn, err = grpc.NewClient(r.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Conn.Close() })
	waitServing(t, r.Conn)
	return r
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitServing watches the router's health until it is SERVING.
func waitServing(t testing.TB, cc *grpc.ClientConn) {
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
			t.Fatalf("router never SERVING: %v", err)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
	}
}

// Register registers a worker of model with dpSize ranks serving at
// endpoint and no KV events: the router routes it from its own
// predictions, which is enough to exercise a gateway.
func (r *Router) Register(t testing.TB, id, model, endpoint string, dpSize uint32) {
	t.Helper()
	_, err := kvrouterv1.NewRegistryClient(r.Conn).RegisterWorker(context.Background(),
		&kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{
			WorkerId: id, Model: model, Endpoint: endpoint, DpSize: dpSize, BlockSize: 16,
		}})
	if err != nil {
		t.Fatal(err)
	}
}

// ActiveRequests is the sum of kvrouter_active_requests over every worker
// and rank, read from /metrics.
func (r *Router) ActiveRequests(t testing.TB) float64 {
	t.Helper()
	resp, err := http.Get("http://" + r.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "kvrouter_active_requests{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// Dispatch is one request an Engine served.
type Dispatch struct {
	Path string
	// Rank is the X-Data-Parallel-Rank header as sent ("" when absent).
	Rank string
}

// Engine stands in for a vLLM API server: POST /v1/completions streams
// Tokens server-sent events and [DONE].
type Engine struct {
	Tokens int

	srv  *httptest.Server
	mu   sync.Mutex
	got  []Dispatch
	seen chan Dispatch
	hold chan struct{}
}

// HoldAfterFirst makes the engine announce each request on seen as it
// arrives and stop after its first event until release is closed, so a
// test can act while a response is mid-stream.
func (e *Engine) HoldAfterFirst() (seen <-chan Dispatch, release chan<- struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen, e.hold = make(chan Dispatch, 1), make(chan struct{})
	return e.seen, e.hold
}

// StartEngine serves an Engine until the test ends.
func StartEngine(t testing.TB, tokens int) *Engine {
	e := &Engine{Tokens: tokens}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.srv.Close)
	return e
}

// Addr is the engine's host:port, as a worker's endpoint.
func (e *Engine) Addr() string { return e.srv.Listener.Addr().String() }

// Dispatches returns the requests served so far.
func (e *Engine) Dispatches() []Dispatch {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Dispatch(nil), e.got...)
}

func (e *Engine) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	d := Dispatch{Path: r.URL.Path, Rank: r.Header.Get("X-Data-Parallel-Rank")}
	e.mu.Lock()
	e.got = append(e.got, d)
	seen, hold := e.seen, e.hold
	e.mu.Unlock()
	if seen != nil {
		seen <- d
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	for i := 0; i < e.Tokens; i++ {
		fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
		if fl != nil {
			fl.Flush()
		}
		if i == 0 && hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}
