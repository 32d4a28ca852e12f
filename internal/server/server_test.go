package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shamaton/msgpack/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

const blockSize = 16

type env struct {
	router   kvrouterv1.RouterClient
	registry kvrouterv1.RegistryClient
	srv      *Server
}

// newEnv serves a router on loopback; mods change its scoring config.
func newEnv(t *testing.T, mods ...func(*scoring.Config)) *env {
	t.Helper()
	idx := radix.New(radix.Config{CheckInvariants: true})
	reg := prometheus.NewRegistry()
	ing, err := ingest.New(ingest.Config{Index: idx, BlockSize: blockSize, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ing.Close() })
	// The tests' costs are the blocks policy's (scoring's tests cover the time policy).
	scfg := scoring.Config{Index: idx, BlockSize: blockSize, DisablePrediction: true, Seed: 1, Policy: scoring.PolicyBlocks}
	for _, mod := range mods {
		mod(&scfg)
	}
	rt, err := scoring.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Router: rt, Ingest: ing, Index: idx, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	cc := serveLoopback(t, srv)
	return &env{router: kvrouterv1.NewRouterClient(cc), registry: kvrouterv1.NewRegistryClient(cc), srv: srv}
}

// serveLoopback serves srv's services on a loopback port for the test and
// returns a client connection to it.
func serveLoopback(t *testing.T, srv *Server) *grpc.ClientConn {
	t.Helper()
	gs := grpc.NewServer(srv.GRPCOptions()...)
	srv.RegisterServices(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// callCtx bounds one RPC of a test that makes thousands: a deadline
// shared by all of them would bound the test's running time, which a
// loaded machine stretches past it.
func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 20*time.Second)
}

// listenPub binds a publisher on a port the kernel picks, as an engine
// does, and returns it with that port: a port probed free and bound later
// can be taken in between.
func listenPub(t *testing.T) (zmq4.Socket, int) {
	t.Helper()
	pub := zmq4.NewPub(context.Background())
	t.Cleanup(func() { pub.Close() })
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return pub, pub.Addr().(*net.TCPAddr).Port
}

// storedBatch is a vLLM >= 0.26 map-form batch storing blocks of 16 tokens each.
func storedBatch(t *testing.T, hashes []uint64, parent any, toks []uint32) []byte {
	t.Helper()
	ev := map[string]any{
		"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
		"token_ids": toks, "block_size": blockSize, "lora_id": nil, "medium": "GPU",
		"lora_name": nil, "extra_keys": nil, "group_idx": 0, "kv_cache_spec_kind": "full_attention",
	}
	b, err := msgpack.Marshal([]any{1.0, []any{ev}, 0})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func seqFrame(seq uint64) []byte {
	b := make([]byte, 8)
	for i := range 8 {
		b[7-i] = byte(seq >> (8 * i))
	}
	return b
}

func TestScoreAndRouteFollowEngineEvents(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	pub, port := listenPub(t)
	for _, w := range []*kvrouterv1.Worker{
		{WorkerId: "engine-a", Model: "m", Endpoint: "a:8000", KvEventsEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", port)},
		{WorkerId: "approx-b", Model: "m", Endpoint: "b:8000"},
		{WorkerId: "other-model", Model: "m2", Endpoint: "c:8000"},
	} {
		if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
			t.Fatal(err)
		}
	}
	toks := make([]uint32, 3*blockSize+5)
	for i := range toks {
		toks[i] = uint32(1000 + i)
	}
	// The engine stores the prompt's first two blocks. PUB drops messages
	// until the subscription arrives, so publish until the router has
	// applied one batch: its events_applied counts a batch once the whole
	// batch is in the index (a Score alone could see it half applied).
	batch := storedBatch(t, []uint64{0xa1, 0xa2}, nil, toks[:2*blockSize])
	prompt := &kvrouterv1.Prompt{Model: "m", TokenIds: toks}
	deadline := time.Now().Add(15 * time.Second)
	for seq := uint64(0); ; seq++ {
		if err := pub.Send(zmq4.NewMsgFrom([]byte{}, seqFrame(seq), batch)); err != nil {
			t.Fatal(err)
		}
		lw, err := e.registry.ListWorkers(c, &kvrouterv1.ListWorkersRequest{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		if applied(lw, "engine-a") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine-a never applied a batch: %v", lw)
		}
		time.Sleep(20 * time.Millisecond) // publishing pace while the subscription connects, not synchronization
	}
	sr, err := e.router.Score(c, &kvrouterv1.ScoreRequest{Prompt: prompt})
	if err != nil {
		t.Fatal(err)
	}
	if sr.PromptBlocks != 3 || sr.BlockSize != blockSize || len(sr.Scores) != 2 {
		t.Fatalf("score = %v; want 3 prompt blocks and the 2 workers of model m", sr)
	}
	if s := sr.Scores[0]; s.WorkerId != "engine-a" || s.DeviceBlocks != 2 || s.CachedBlocks != 2 {
		t.Fatalf("top score = %v", s)
	}

	rr, err := e.router.Route(c, &kvrouterv1.RouteRequest{Prompt: prompt, RequestId: "req-1"})
	if err != nil {
		t.Fatal(err)
	}
	if rr.WorkerId != "engine-a" || rr.Endpoint != "a:8000" || rr.MatchedBlocks != 2 || rr.Cost != 2 || len(rr.Candidates) != 2 {
		t.Fatalf("route = %v; want engine-a, cost 2 x (3-2) = 2 at the default prefill weight, 2 candidates", rr)
	}
	if _, err := e.router.MarkPrefillDone(c, &kvrouterv1.RequestRef{RequestId: "req-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "req-1"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "req-1"})
	wantCode(t, err, codes.NotFound, "req-1")

	lw, err := e.registry.ListWorkers(c, &kvrouterv1.ListWorkersRequest{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if len(lw.Workers) != 2 || lw.Workers[1].Worker.WorkerId != "engine-a" || !lw.Workers[1].Connected || lw.Workers[1].CachedBlocks != 2 || lw.Workers[1].EventsApplied == 0 {
		t.Fatalf("ListWorkers = %v; want engine-a connected with 2 cached blocks", lw)
	}

	// Unregistering drops the worker's blocks: it no longer matches.
	if _, err := e.registry.UnregisterWorker(c, &kvrouterv1.UnregisterWorkerRequest{WorkerId: "engine-a"}); err != nil {
		t.Fatal(err)
	}
	sr, err = e.router.Score(c, &kvrouterv1.ScoreRequest{Prompt: prompt})
	if err != nil || len(sr.Scores) != 1 || sr.Scores[0].MatchedBlocks != 0 {
		t.Fatalf("score after unregister = %v, %v", sr, err)
	}
	_, err = e.registry.UnregisterWorker(c, &kvrouterv1.UnregisterWorkerRequest{WorkerId: "engine-a"})
	wantCode(t, err, codes.NotFound, "engine-a")
}

func wantCode(t *testing.T, err error, code codes.Code, text string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), text) {
		t.Fatalf("error %v; want %v mentioning %q", err, code, text)
	}
}

func TestErrorCodes(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: "w", Model: "m"}}); err != nil {
		t.Fatal(err)
	}
	toks := []uint32{1, 2, 3}
	for _, tc := range []struct {
		name string
		req  *kvrouterv1.RouteRequest
		code codes.Code
		text string
	}{
		{"no prompt", &kvrouterv1.RouteRequest{}, codes.InvalidArgument, "prompt"},
		{"empty prompt", &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m"}}, codes.InvalidArgument, "empty"},
		{"both", &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks, BlockHashes: []uint64{1}}}, codes.InvalidArgument, "both"},
		{"too long", &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: make([]uint32, 262145)}}, codes.InvalidArgument, "max-prompt-tokens"},
		{"bad mm", &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks, MmItems: []*kvrouterv1.MultimodalItem{{Hash: "", Length: 1}}}}, codes.InvalidArgument, "mm_items[0]"},
		{"unknown model", &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "nope", TokenIds: toks}}, codes.NotFound, "nope"},
	} {
		_, err := e.router.Route(c, tc.req)
		if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.text) {
			t.Errorf("%s: %v; want %v mentioning %q", tc.name, err, tc.code, tc.text)
		}
	}
	_, err := e.router.MarkFinished(c, &kvrouterv1.RequestRef{})
	wantCode(t, err, codes.InvalidArgument, "request_id")
	// Errors are counted by method and code.
	got := testutil.ToFloat64(e.srv.metrics.errors.WithLabelValues("/kvrouter.v1.Router/Route", "InvalidArgument"))
	if got != 5 {
		t.Fatalf("kvrouter_rpc_errors_total{Route,InvalidArgument} = %v, want 5", got)
	}
}

// applied is the events_applied ListWorkers reports for worker id.
func applied(lw *kvrouterv1.ListWorkersResponse, id string) uint64 {
	for _, w := range lw.GetWorkers() {
		if w.GetWorker().GetWorkerId() == id {
			return w.GetEventsApplied()
		}
	}
	return 0
}
