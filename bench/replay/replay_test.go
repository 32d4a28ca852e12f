package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"bytes"
	"context"
	"encoding/xml"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/stats"
	"github.com/kvrouter/kvrouter/bench/trace"
)

func TestClock(t *testing.T) {
	c := Clock{T0: time.Unix(100, 0), SpeedUp: 10}
	if got := c.Wall(10 * time.Second); !got.Equal(time.Unix(101, 0)) {
		t.Fatalf("Wall = %v", got)
	}
	if got := c.Sim(time.Unix(102, 0)); got != 20*time.Second {
		t.Fatalf("Sim = %v", got)
	}
}

// fakeRouter routes every prompt to worker (seq mod n) and records marks.
type fakeRouter struct {
	kvrouterv1.UnimplementedRouterServer
	mu     sync.Mutex
	n      int
	routed int
	failAt int // Route call number that fails (1-based); 0 never
	busy   int // Route calls answered ResourceExhausted first
	order  map[string][]string
}

func (f *fakeRouter) Route(_ context.Context, r *kvrouterv1.RouteRequest) (*kvrouterv1.RouteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routed++
	if f.routed == f.failAt {
		return nil, status.Error(codes.Unavailable, "every candidate is excluded")
	}
	if f.routed <= f.busy {
		return nil, status.Error(codes.ResourceExhausted, "every worker of model \"m\" is over its busy thresholds")
	}
	if r.RequestId == "" || len(r.Prompt.GetTokenIds()) == 0 || r.Prompt.Model != "m" {
		return nil, status.Error(codes.InvalidArgument, "bad request")
	}
	f.order[r.RequestId] = append(f.order[r.RequestId], "route")
	w := f.routed % f.n
	return &kvrouterv1.RouteResponse{WorkerId: []string{"engine-00", "engine-01"}[w], PromptBlocks: uint32(len(r.Prompt.TokenIds) / 16)}, nil
}

func (f *fakeRouter) mark(id, what string) (*kvrouterv1.Ack, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.order[id]; !ok {
		return nil, status.Error(codes.NotFound, "unknown request")
	}
	f.order[id] = append(f.order[id], what)
	return &kvrouterv1.Ack{}, nil
}

func (f *fakeRouter) MarkPrefillDone(_ context.Context, r *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	return f.mark(r.RequestId, "prefill")
}

func (f *fakeRouter) MarkFinished(_ context.Context, r *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	return f.mark(r.RequestId, "finish")
}

// serveFake serves a fakeRouter on a loopback port.
func serveFake(t *testing.T) (*fakeRouter, *grpc.Server, string) {
	t.Helper()
	fr := &fakeRouter{n: 2, order: map[string][]string{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	kvrouterv1.RegisterRouterServer(srv, fr)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return fr, srv, lis.Addr().String()
}

func smallTrace() []trace.Request {
	var reqs []trace.Request
	for i := 0; i < 20; i++ {
		reqs = append(reqs, trace.Request{
			Arrival: time.Duration(i) * 100 * time.Millisecond, InputLength: 700, OutputLength: 3,
			HashIDs: []uint64{1, uint64(10 + i%4)},
		})
	}
	return reqs
}

func TestPlayWithRouter(t *testing.T) {
	fr, _, addr := serveFake(t)
	fr.mu.Lock()
	fr.failAt = 3 // the server already serves: set under its lock
	fr.mu.Unlock()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rc := kvrouterv1.NewRouterClient(cc)

	fleet, err := harness.StartFleet(harness.FleetConfig{Engines: 2, Engine: engine.Config{CapacityBlocks: 1000, PrefillPerToken: time.Millisecond, DecodePerToken: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	reqs := smallTrace()
	var progress int
	pr, err := Play(context.Background(), PlayConfig{
		Fleet: fleet, Requests: reqs, Clock: Clock{T0: time.Now(), SpeedUp: 100},
		Choose: RouterChooser(rc, fleet, "m"), Router: rc, IDPrefix: "t-",
		OnProgress: func(Progress) { progress++ }, ProgressEvery: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.TTFT) != 20 || pr.ChooseErrors != 1 || len(pr.RouteLatency) != 19 || pr.MarkErrors != 0 {
		t.Fatalf("ttft %d, choose errors %d, routed %d, mark errors %d (%s)", len(pr.TTFT), pr.ChooseErrors, len(pr.RouteLatency), pr.MarkErrors, pr.FirstError)
	}
	if !strings.Contains(pr.FirstError, "every candidate is excluded") {
		t.Fatalf("first error %q", pr.FirstError)
	}
	if progress == 0 {
		t.Fatal("no progress reported")
	}
	fr.mu.Lock()
	for id, seq := range fr.order {
		if strings.Join(seq, ",") != "route,prefill,finish" {
			t.Errorf("%s: calls %v", id, seq)
		}
	}
	if len(fr.order) != 19 {
		t.Errorf("%d requests tracked, want 19", len(fr.order))
	}
	fr.mu.Unlock()
	tot := fleet.Totals()
	var tokens uint64
	for _, n := range pr.PromptTokens {
		tokens += n
	}
	if tot.Requests != 20 || tokens != 20*700 || tot.PromptBlocks != 20*43 {
		t.Fatalf("totals %+v, tokens %d", tot, tokens)
	}
	// All share id 1 (32 blocks); with two engines, only the first request on each misses it.
	if tot.CachedBlocks < 18*32 {
		t.Fatalf("cached %d blocks, want at least %d", tot.CachedBlocks, 18*32)
	}
	for _, d := range pr.TTFT {
		if d < 0 {
			t.Fatalf("negative TTFT %v", d)
		}
	}
}

func TestPlayBaselinesAndCancel(t *testing.T) {
	fleet, err := harness.StartFleet(harness.FleetConfig{Engines: 3, Engine: engine.Config{CapacityBlocks: 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	pr, err := Play(context.Background(), PlayConfig{Fleet: fleet, Requests: smallTrace(), Clock: Clock{T0: time.Now(), SpeedUp: 1000}, Choose: RoundRobin(3)})
	if err != nil {
		t.Fatal(err)
	}
	if pr.PromptTokens[0] != 7*700 || pr.PromptTokens[1] != 7*700 || pr.PromptTokens[2] != 6*700 {
		t.Fatalf("round robin loads %v", pr.PromptTokens)
	}
	// A replay scheduled far in the future ends promptly when cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Play(ctx, PlayConfig{Fleet: fleet, Requests: smallTrace(), Clock: Clock{T0: time.Now().Add(time.Hour), SpeedUp: 1}, Choose: Random(3, 1)})
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("cancelled play returned nil")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled play did not return")
	}
}

func TestReportOutputs(t *testing.T) {
	r := &Report{Trace: "t.jsonl", Requests: 10, Engines: 2, CapacityBlocks: 8, BlockSize: 16, SpeedUp: 5, PooledCeiling: 0.2,
		Results: []PolicyResult{
			{Policy: "kvrouter", HitRate: 0.19, HitRateOfCeiling: 0.95, Imbalance: 1.1, TTFT: stats.Summary{P50: time.Second, P99: 3 * time.Second}, Route: stats.Summary{N: 10, P50: time.Millisecond, P99: 2 * time.Millisecond}, EventsPerSec: 12},
			{Policy: "round-robin<&>", HitRate: 0.05, Imbalance: 1.0, TTFT: stats.Summary{P50: 2 * time.Second, P99: 9 * time.Second}},
		}}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kvrouter", "19.0%", "95%", "9.00", "2.0", "pooled LRU ceiling"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	dec := xml.NewDecoder(strings.NewReader(r.SVG()))
	rects := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	if rects != 1+2+4 { // background, two hit bars, two TTFT pairs
		t.Fatalf("%d rects", rects)
	}
}

func TestStartRouterMissingBinary(t *testing.T) {
	_, err := harness.StartRouter(context.Background(), harness.RouterConfig{Bin: "/nonexistent/kvrouter"})
	if err == nil || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("err = %v", err)
	}
}

func TestScaleRouterArgs(t *testing.T) {
	if got := strings.Join(ScaleRouterArgs([]string{"--predict=false"}, 60), " "); got != "--predict=false --prediction-ttl=2s" {
		t.Errorf("scaled: %q", got)
	}
	if got := strings.Join(ScaleRouterArgs([]string{"--prediction-ttl=9s"}, 60), " "); got != "--prediction-ttl=9s" {
		t.Errorf("explicit ttl overridden: %q", got)
	}
	if got := ScaleRouterArgs(nil, 1); len(got) != 0 {
		t.Errorf("speed-up 1: %q", got)
	}
}

func TestRandomDeterministic(t *testing.T) {
	a, b := Random(4, 7), Random(4, 7)
	counts := make([]int, 4)
	for seq := 0; seq < 4000; seq++ {
		ca, _ := a(context.Background(), seq, nil, "")
		cb, _ := b(context.Background(), seq, nil, "")
		if ca.Engine != cb.Engine {
			t.Fatalf("seq %d: %d vs %d", seq, ca.Engine, cb.Engine)
		}
		counts[ca.Engine]++
	}
	for i, c := range counts {
		if c < 850 || c > 1150 {
			t.Fatalf("engine %d chosen %d of 4000 times: %v", i, c, counts)
		}
	}
}
