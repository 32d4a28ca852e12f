package harness

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// stubRouter answers Route with worker "w" after its first busy calls
// answered ResourceExhausted, and a mark with NotFound unless it routed the
// request.
type stubRouter struct {
	kvrouterv1.UnimplementedRouterServer
	mu     sync.Mutex
	routed int
	busy   int
	known  map[string]bool
}

func (f *stubRouter) Route(_ context.Context, r *kvrouterv1.RouteRequest) (*kvrouterv1.RouteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.routed++; f.routed <= f.busy {
		return nil, status.Error(codes.ResourceExhausted, "every worker is over its busy thresholds")
	}
	f.known[r.RequestId] = true
	return &kvrouterv1.RouteResponse{WorkerId: "w"}, nil
}

func (f *stubRouter) mark(id string) (*kvrouterv1.Ack, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known[id] {
		return nil, status.Error(codes.NotFound, "unknown request")
	}
	return &kvrouterv1.Ack{}, nil
}

func (f *stubRouter) MarkPrefillDone(_ context.Context, r *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	return f.mark(r.RequestId)
}

func (f *stubRouter) MarkFinished(_ context.Context, r *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	return f.mark(r.RequestId)
}

// serveStub serves a stubRouter on a loopback port.
func serveStub(t *testing.T) (*stubRouter, *grpc.Server, string) {
	t.Helper()
	fr := &stubRouter{known: map[string]bool{}}
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

// routeReq is a Route for request id.
func routeReq(id string) *kvrouterv1.RouteRequest {
	return &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: make([]uint32, 32)}, RequestId: id}
}

func TestGateway(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	if spreadMisses(ids) == 0 {
		t.Fatal("no mark of the test's ids is spread to the other replica: pick other ids")
	}
	for _, tc := range []struct {
		marks    string
		notFound int64 // of the 4 requests' 8 marks
	}{
		{MarksSpread, spreadMisses(ids)},
		{MarksOrigin, 0},
	} {
		t.Run(tc.marks, func(t *testing.T) {
			_, srv0, a0 := serveStub(t)
			_, _, a1 := serveStub(t)
			g, err := NewGateway(GatewayConfig{Addrs: []string{a0, a1}, Marks: tc.marks, DownFor: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			ctx := context.Background()
			marks := g.Marks()
			for _, id := range ids {
				if _, _, err := g.Route(ctx, routeReq(id)); err != nil {
					t.Fatalf("route %s: %v", id, err)
				}
			}
			for _, id := range ids {
				marks.MarkPrefillDone(ctx, &kvrouterv1.RequestRef{RequestId: id})
			}
			for _, id := range ids {
				marks.MarkFinished(ctx, &kvrouterv1.RequestRef{RequestId: id})
			}
			st := g.Stats()
			if st.RoutesPerReplica[0] != 2 || st.RoutesPerReplica[1] != 2 || st.Marks != 8 || st.MarksNotFound != tc.notFound || st.MarkRetries != 0 {
				t.Fatalf("before the stop: %+v, want 2/2 Routes, 8 marks, %d NotFound and no retries", st, tc.notFound)
			}

			// Replica 0 goes away: its Routes are retried on replica 1, and
			// with DownFor an hour it is tried only once.
			srv0.Stop()
			for i := 4; i < 8; i++ {
				if _, _, err := g.Route(ctx, routeReq("x"+ids[i-4])); err != nil {
					t.Fatalf("route after the stop: %v", err)
				}
			}
			d := g.Stats().Sub(st)
			if d.RoutesPerReplica[0] != 0 || d.RoutesPerReplica[1] != 4 || d.RouteRetries != 1 || d.RoutesFailed != 0 {
				t.Fatalf("after the stop: %+v, want 0/4 Routes, one retry, none failed", d)
			}
		})
	}
}

func TestGatewayAllDown(t *testing.T) {
	_, srv, a := serveStub(t)
	srv.Stop()
	g, err := NewGateway(GatewayConfig{Addrs: []string{a, a}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, _, err := g.Route(context.Background(), routeReq("r")); err == nil {
		t.Fatal("Route with every replica down: no error")
	}
	if st := g.Stats(); st.RoutesFailed != 1 || st.RouteRetries != 2 {
		t.Fatalf("%+v, want 1 failed after 2 retries", st)
	}
}

// TestGatewayBusy: a replica answering ResourceExhausted (every worker
// busy) is asked again after a backoff and stays in rotation; once the
// retries are spent the error reaches the caller as it is.
func TestGatewayBusy(t *testing.T) {
	fr0, _, a0 := serveStub(t)
	fr1, _, a1 := serveStub(t)
	fr0.mu.Lock()
	fr0.busy = 2
	fr0.mu.Unlock()
	g, err := NewGateway(GatewayConfig{Addrs: []string{a0, a1}, BusyBackoff: time.Microsecond, BusyRetries: 3, DownFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, id := range []string{"a", "b", "c"} {
		if _, _, err := g.Route(context.Background(), routeReq(id)); err != nil {
			t.Fatalf("route %s: %v", id, err)
		}
	}
	// Route a went to replica 0 after two busy answers; b to replica 1; c
	// to replica 0 again: it was not ejected.
	if st := g.Stats(); st.BusyRetries != 2 || st.RouteRetries != 0 || st.RoutesFailed != 0 || st.RoutesPerReplica[0] != 2 || st.RoutesPerReplica[1] != 1 {
		t.Fatalf("%+v; want 2 busy retries, no failover, 2/1 Routes", st)
	}
	for _, fr := range []*stubRouter{fr0, fr1} { // (d goes to replica 1)
		fr.mu.Lock()
		fr.busy = fr.routed + 10
		fr.mu.Unlock()
	}
	_, _, err = g.Route(context.Background(), routeReq("d"))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("route with every retry busy: %v; want ResourceExhausted", err)
	}
	if st := g.Stats(); st.BusyRetries != 5 || st.RouteRetries != 0 {
		t.Fatalf("%+v; want 3 more busy retries and no failover", st)
	}
}

// spreadMisses counts the marks of ids (Routed round-robin over 2 replicas)
// that MarksSpread sends to the other replica.
func spreadMisses(ids []string) int64 {
	g := &Gateway{clients: make([]kvrouterv1.RouterClient, 2)}
	var n int64
	for i, id := range ids {
		for _, fin := range []bool{false, true} {
			if g.spread(id, fin) != i%2 {
				n++
			}
		}
	}
	return n
}

func TestSpreadIsEven(t *testing.T) {
	g := &Gateway{clients: make([]kvrouterv1.RouterClient, 3)}
	var count [3]int
	for i := 0; i < 3000; i++ {
		count[g.spread(fmt.Sprintf("kvrouter-%d", i), i%2 == 0)]++
	}
	for r, c := range count {
		if c < 900 || c > 1100 {
			t.Fatalf("replica %d got %d of 3000 marks: %v", r, c, count)
		}
	}
}

func TestGatewayRoutesToFirst(t *testing.T) {
	_, _, a0 := serveStub(t)
	_, _, a1 := serveStub(t)
	g, err := NewGateway(GatewayConfig{Addrs: []string{a0, a1}, RoutesToFirst: true})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i := 0; i < 4; i++ {
		if _, _, err := g.Route(context.Background(), routeReq(fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	if st := g.Stats(); st.RoutesPerReplica[0] != 4 || st.RoutesPerReplica[1] != 0 {
		t.Fatalf("Routes per replica %v, want all 4 on replica 0", st.RoutesPerReplica)
	}
}
