package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/examples/internal/routertest"
	"github.com/kvrouter/kvrouter/internal/testaddr"
)

const model = "example-model"

func prompt(model string, n int) *kvrouterv1.Prompt {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(1000 + i)
	}
	return &kvrouterv1.Prompt{Model: model, TokenIds: ids}
}

// setup is a real router with one two-rank worker served by eng.
func setup(t *testing.T, tokens int) (*routertest.Router, *routertest.Engine, *Gateway) {
	r := routertest.Start(t)
	eng := routertest.StartEngine(t, tokens)
	r.Register(t, "engine-0", model, eng.Addr(), 2)
	g := &Gateway{
		Routers:      []kvrouterv1.RouterClient{kvrouterv1.NewRouterClient(r.Conn)},
		HTTP:         http.DefaultClient,
		RouteTimeout: 10 * time.Second,
		Fallback:     func() string { return eng.Addr() },
	}
	return r, eng, g
}

// TestLifecycle: each request is routed, dispatched with the chosen rank
// in X-Data-Parallel-Rank, streamed to the end, and finished: the router
// holds no load afterwards.
func TestLifecycle(t *testing.T) {
	r, eng, g := setup(t, 5)
	for i := 0; i < 4; i++ {
		res, err := g.Serve(context.Background(), "req-"+strconv.Itoa(i), prompt(model, 64), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Routed || res.Endpoint != eng.Addr() || res.Chunks != 5 {
			t.Fatalf("request %d: %+v, want routed to %s with 5 chunks", i, res, eng.Addr())
		}
		d := eng.Dispatches()
		if got := d[len(d)-1]; got.Rank != strconv.Itoa(int(res.DPRank)) || got.Path != "/v1/completions" {
			t.Fatalf("request %d: engine got %+v, want rank header %d", i, got, res.DPRank)
		}
	}
	if n := r.ActiveRequests(t); n != 0 {
		t.Fatalf("%v requests still active after MarkFinished", n)
	}
}

// TestActiveUntilFinished: mid-stream the request is load on the router;
// once the response ends, it is not.
func TestActiveUntilFinished(t *testing.T) {
	r, eng, g := setup(t, 3)
	seen, release := eng.HoldAfterFirst()
	done := make(chan error, 1)
	go func() {
		_, err := g.Serve(context.Background(), "held", prompt(model, 32), []byte(`{}`))
		done <- err
	}()
	<-seen
	if n := r.ActiveRequests(t); n != 1 {
		t.Fatalf("mid-stream: %v active requests, want 1", n)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := r.ActiveRequests(t); n != 0 {
		t.Fatalf("after the end: %v active requests, want 0", n)
	}
}

// TestCancelFinishes: a client that goes away mid-stream still ends the
// request's load on the router.
func TestCancelFinishes(t *testing.T) {
	r, eng, g := setup(t, 3)
	seen, release := eng.HoldAfterFirst()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := g.Serve(ctx, "cancelled", prompt(model, 32), []byte(`{}`))
		done <- err
	}()
	<-seen
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve = %v, want context.Canceled", err)
	}
	if n := r.ActiveRequests(t); n != 0 {
		t.Fatalf("after cancel: %v active requests, want 0", n)
	}
}

// TestFallbackOnNotFound: a model no worker serves is dispatched to the
// fallback endpoint, without a rank header.
func TestFallbackOnNotFound(t *testing.T) {
	_, eng, g := setup(t, 2)
	res, err := g.Serve(context.Background(), "other", prompt("no-such-model", 32), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Routed || res.Chunks != 2 {
		t.Fatalf("%+v, want a fallback dispatch with 2 chunks", res)
	}
	if d := eng.Dispatches(); len(d) != 1 || d[0].Rank != "" {
		t.Fatalf("engine got %+v, want one dispatch without a rank header", d)
	}
}

// TestNextReplicaOnUnavailable: a replica that cannot be reached answers
// Unavailable, and the next one routes the request.
func TestNextReplicaOnUnavailable(t *testing.T) {
	_, eng, g := setup(t, 2)
	refused, err := testaddr.NewRefused() // held, never listening: connection refused
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	dead := refused.Addr()
	cc, err := grpc.NewClient(dead, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	g.Routers = append([]kvrouterv1.RouterClient{kvrouterv1.NewRouterClient(cc)}, g.Routers...)
	res, err := g.Serve(context.Background(), "retried", prompt(model, 32), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Routed {
		t.Fatalf("%+v, want routed by the second replica", res)
	}
	if d := eng.Dispatches(); len(d) != 1 || d[0].Rank != strconv.Itoa(int(res.DPRank)) {
		t.Fatalf("engine got %+v, want rank %d", d, res.DPRank)
	}
}
