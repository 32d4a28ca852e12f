package server

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// routeSequence is a run of Route requests with successes and every kind of
// failure, prompts of different lengths (so a reused request's token memory
// is too short, then long enough) and predictions steering later choices.
func routeSequence() []*kvrouterv1.RouteRequest {
	toks := func(n, base int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(base + i)
		}
		return out
	}
	p := func(n, base int) *kvrouterv1.Prompt { return &kvrouterv1.Prompt{Model: "m", TokenIds: toks(n, base)} }
	temp := 0.5
	return []*kvrouterv1.RouteRequest{
		{Prompt: p(4*blockSize, 0), RequestId: "a"},
		{Prompt: p(40*blockSize+3, 0)},
		{Prompt: &kvrouterv1.Prompt{Model: "nope", TokenIds: toks(32, 0)}},
		{Prompt: p(2*blockSize, 0), RequestId: "a"}, // already active
		{},
		{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks(3, 0), BlockHashes: []uint64{1}}},
		{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks(64, 0), MmItems: []*kvrouterv1.MultimodalItem{{Hash: "x", Offset: 60, Length: 9}}}},
		{Prompt: &kvrouterv1.Prompt{Model: "m", BlockHashes: []uint64{7, 8, 9}}, MaxCandidates: 2},
		{Prompt: p(8*blockSize, 1000), Temperature: &temp},
		{Prompt: p(4*blockSize, 0), MaxCandidates: 1},
		{Prompt: p(40*blockSize, 0), RequestId: "b", MaxCandidates: 3},
	}
}

// routeEnv is newEnv with predictions on and three workers without events
// (routed from predictions alone, so every Route changes the next).
func routeEnv(t *testing.T) *env {
	e := newEnv(t, func(c *scoring.Config) { c.DisablePrediction = false })
	for _, id := range []string{"w1", "w2", "w3"} {
		w := &kvrouterv1.Worker{WorkerId: id, Model: "m", Endpoint: id + ":8000", DpSize: 2}
		if _, err := e.registry.RegisterWorker(ctx(t), &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestRouteStream checks that RouteStream answers each item as Route does,
// in order, errors included, and goes on after a failed item: the same
// requests are sent to three routers in the same state, in process (fresh
// messages), as unary calls (pooled requests) and on one stream (one reused
// request), all sent before any answer is read.
func TestRouteStream(t *testing.T) {
	reqs := routeSequence()
	direct, unary, streamed := routeEnv(t), routeEnv(t), routeEnv(t)
	c := ctx(t)
	st, err := streamed.router.RouteStream(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range reqs {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i, req := range reqs {
		want, werr := direct.srv.Route(c, proto.Clone(req).(*kvrouterv1.RouteRequest))
		got, gerr := unary.router.Route(c, req)
		if status.Code(gerr) != status.Code(werr) || status.Convert(gerr).Message() != status.Convert(werr).Message() || !proto.Equal(got, want) {
			t.Fatalf("item %d: unary Route %v, %v; in process %v, %v", i, got, gerr, want, werr)
		}
		item, err := st.Recv()
		if err != nil {
			t.Fatalf("item %d: stream ended: %v", i, err)
		}
		ws := status.Convert(werr)
		if codes.Code(item.Code) != ws.Code() || item.Message != ws.Message() || !proto.Equal(item.Response, want) {
			t.Fatalf("item %d: stream answered %v; Route answers %v, %v", i, item, want, werr)
		}
		if werr != nil {
			failed++
		}
	}
	if failed != 5 {
		t.Fatalf("%d items failed; the sequence has 5 failures", failed)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last item: %v, want the stream's end", err)
	}
	// Items are counted as calls of RouteStream, by code.
	m := streamed.srv.metrics
	if got := testutil.ToFloat64(m.errors.WithLabelValues(kvrouterv1.Router_RouteStream_FullMethodName, "InvalidArgument")); got != 3 {
		t.Fatalf("kvrouter_rpc_errors_total{RouteStream,InvalidArgument} = %v, want 3", got)
	}
	if got := testutil.CollectAndCount(m.latency); got != 3 {
		t.Fatalf("%d latency series, want RegisterWorker's, RouteStream's and Route's (reported from the start)", got)
	}
}

// TestRouteStreamBeforeStart checks that a stream is refused with
// Unavailable until the server is started, as the unary calls are.
func TestRouteStreamBeforeStart(t *testing.T) {
	srv, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	cc := serveLoopback(t, srv)
	st, err := kvrouterv1.NewRouterClient(cc).RouteStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&kvrouterv1.RouteRequest{}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantCode(t, err, codes.Unavailable, "restoring")
}

// TestRouteStreamCancel checks that a stream the client cancels ends on the
// server too: the next Route on a new stream still works.
func TestRouteStreamCancel(t *testing.T) {
	e := routeEnv(t)
	c, cancel := context.WithCancel(ctx(t))
	st, err := e.router.RouteStream(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(routeSequence()[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := st.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("after cancel: %v, want Canceled", err)
	}
	st2, err := e.router.RouteStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.Send(routeSequence()[1]); err != nil {
		t.Fatal(err)
	}
	if item, err := st2.Recv(); err != nil || item.Code != 0 || item.Response.GetWorkerId() == "" {
		t.Fatalf("a new stream after a cancelled one: %v, %v", item, err)
	}
}

// TestRouteMaxCandidates checks the response's candidate list: max_candidates
// 0 lists DefaultMaxCandidates, the chosen one first and the rest by
// ascending cost; a limit at or above the candidates' number lists them all.
func TestRouteMaxCandidates(t *testing.T) {
	e := routeEnv(t) // 3 workers x 2 ranks
	for _, id := range []string{"w4", "w5"} {
		w := &kvrouterv1.Worker{WorkerId: id, Model: "m", Endpoint: id + ":8000", DpSize: 2}
		if _, err := e.registry.RegisterWorker(ctx(t), &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
			t.Fatal(err)
		}
	}
	const ranks = 10
	prompt := routeSequence()[1].Prompt
	for _, tc := range []struct {
		max  uint32
		want int
	}{{0, DefaultMaxCandidates}, {3, 3}, {ranks, ranks}, {^uint32(0), ranks}} {
		rr, err := e.router.Route(ctx(t), &kvrouterv1.RouteRequest{Prompt: prompt, MaxCandidates: tc.max})
		if err != nil {
			t.Fatal(err)
		}
		if len(rr.Candidates) != tc.want {
			t.Fatalf("max_candidates %d: %d candidates, want %d", tc.max, len(rr.Candidates), tc.want)
		}
		if tc.want == ranks {
			continue // every candidate, in the fleet's order
		}
		if c := rr.Candidates[0]; c.WorkerId != rr.WorkerId || c.DpRank != rr.DpRank || c.Cost != rr.Cost {
			t.Fatalf("max_candidates %d: first candidate %v, chosen %s/%d", tc.max, c, rr.WorkerId, rr.DpRank)
		}
		for i := 2; i < len(rr.Candidates); i++ {
			if rr.Candidates[i].Cost < rr.Candidates[i-1].Cost {
				t.Fatalf("max_candidates %d: candidates not by ascending cost: %v", tc.max, rr.Candidates)
			}
		}
	}
}
