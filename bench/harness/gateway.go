package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// Where a Gateway sends a request's MarkPrefillDone and MarkFinished.
const (
	// MarksSpread sends each mark to a replica picked by a hash of the
	// request id and the mark, independent of where its Route went, so with
	// N replicas (N-1)/N of the marks reach another replica than the Route:
	// what a fleet of stateless gateways does.
	MarksSpread = "spread"
	// MarksOrigin sends them to the replica that answered the Route (the next
	// live one when it is down): a sticky gateway.
	MarksOrigin = "origin"
)

// GatewayConfig configures a Gateway.
type GatewayConfig struct {
	// Addrs are the replicas' gRPC addresses.
	Addrs []string
	// Marks is MarksSpread (default) or MarksOrigin.
	Marks string
	// RoutesToFirst sends every Route to replica 0 (the next one when it is
	// down) instead of round-robin: a diagnostic that keeps every replica
	// running, ingesting and syncing while one decides.
	RoutesToFirst bool
	// DownFor is how long a replica that failed with Unavailable is skipped
	// (outlier ejection; default 1 s). When every replica is down the
	// gateway tries them all anyway.
	DownFor time.Duration
	// AttemptTimeout bounds one call to one replica (default 5 s).
	AttemptTimeout time.Duration
	// BusyRetries is how many times a call answered ResourceExhausted
	// (every worker busy, or the replica's request table full) is tried
	// again after a backoff (default 5; negative: none). The replica is
	// healthy, so it is not ejected: docs/gateway-errors.md.
	BusyRetries int
	// BusyBackoff is the first backoff, doubled for each retry with full
	// jitter (default 50 ms).
	BusyBackoff time.Duration
}

// Gateway spreads Route over replicas round-robin and MarkPrefillDone and
// MarkFinished as Marks says, as API gateways in front of several routers
// would, and
// retries a call that failed because its replica is unreachable (gRPC
// Unavailable, or its attempt timed out) on the next one. A call answered
// ResourceExhausted (every worker busy) is tried again on the same replica
// after a backoff, without ejecting it. Other errors (NotFound for a mark
// the replica does not know) are returned as they are.
// It has its own connections, so killing a replica looks to it as it would
// to a real gateway.
type Gateway struct {
	cfg       GatewayConfig
	conns     []*grpc.ClientConn
	clients   []kvrouterv1.RouterClient
	next      atomic.Uint64  // Route turns
	downUntil []atomic.Int64 // unix nanoseconds
	origin    sync.Map       // request id -> replica index (MarksOrigin)

	routes, routeRetries, routeFailed atomic.Int64
	busyRetries                       atomic.Int64
	marks, markRetries, marksNotFound atomic.Int64
	marksFailed, routesInFlight       atomic.Int64
	routesBy                          []atomic.Int64

	callsMu sync.Mutex
	calls   *sync.WaitGroup // the Route calls started since the last Settle
}

// GatewayStats counts what the gateway did.
type GatewayStats struct {
	Routes int64 `json:"routes"`
	// RouteRetries are attempts that failed on one replica and were retried
	// on another; RoutesFailed failed on every replica.
	RouteRetries     int64   `json:"route_retries"`
	RoutesFailed     int64   `json:"routes_failed"`
	RoutesPerReplica []int64 `json:"routes_per_replica"`
	// BusyRetries are calls answered ResourceExhausted and tried again
	// after a backoff.
	BusyRetries int64 `json:"busy_retries"`
	Marks       int64 `json:"marks"`
	MarkRetries int64 `json:"mark_retries"`
	// MarksNotFound are marks a replica answered NotFound (it did not know
	// the request); MarksFailed failed otherwise.
	MarksNotFound int64 `json:"marks_not_found"`
	MarksFailed   int64 `json:"marks_failed"`
}

// Sub is s - u, counter by counter.
func (s GatewayStats) Sub(u GatewayStats) GatewayStats {
	d := GatewayStats{Routes: s.Routes - u.Routes, RouteRetries: s.RouteRetries - u.RouteRetries,
		RoutesFailed: s.RoutesFailed - u.RoutesFailed, BusyRetries: s.BusyRetries - u.BusyRetries, Marks: s.Marks - u.Marks, MarkRetries: s.MarkRetries - u.MarkRetries,
		MarksNotFound: s.MarksNotFound - u.MarksNotFound, MarksFailed: s.MarksFailed - u.MarksFailed}
	for i, n := range s.RoutesPerReplica {
		if i < len(u.RoutesPerReplica) {
			n -= u.RoutesPerReplica[i]
		}
		d.RoutesPerReplica = append(d.RoutesPerReplica, n)
	}
	return d
}

// NewGateway dials every replica (lazily, as grpc.NewClient does).
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("gateway: no replicas")
	}
	switch cfg.Marks {
	case "":
		cfg.Marks = MarksSpread
	case MarksSpread, MarksOrigin:
	default:
		return nil, fmt.Errorf("gateway: marks %q: want %s or %s", cfg.Marks, MarksSpread, MarksOrigin)
	}
	if cfg.DownFor == 0 {
		cfg.DownFor = time.Second
	}
	if cfg.AttemptTimeout == 0 {
		cfg.AttemptTimeout = 5 * time.Second
	}
	if cfg.BusyRetries == 0 {
		cfg.BusyRetries = 5
	}
	if cfg.BusyBackoff == 0 {
		cfg.BusyBackoff = 50 * time.Millisecond
	}
	g := &Gateway{cfg: cfg, downUntil: make([]atomic.Int64, len(cfg.Addrs)), routesBy: make([]atomic.Int64, len(cfg.Addrs)),
		calls: new(sync.WaitGroup)}
	for _, a := range cfg.Addrs {
		cc, err := grpc.NewClient(DialAddr(a), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("gateway: dial %s: %w", a, err)
		}
		g.conns = append(g.conns, cc)
		g.clients = append(g.clients, kvrouterv1.NewRouterClient(cc))
	}
	return g, nil
}

// Close closes the connections.
func (g *Gateway) Close() {
	for _, c := range g.conns {
		c.Close()
	}
}

// Stats returns the counters so far.
func (g *Gateway) Stats() GatewayStats {
	s := GatewayStats{
		Routes: g.routes.Load(), RouteRetries: g.routeRetries.Load(), RoutesFailed: g.routeFailed.Load(), BusyRetries: g.busyRetries.Load(),
		Marks: g.marks.Load(), MarkRetries: g.markRetries.Load(),
		MarksNotFound: g.marksNotFound.Load(), MarksFailed: g.marksFailed.Load(),
	}
	for i := range g.routesBy {
		s.RoutesPerReplica = append(s.RoutesPerReplica, g.routesBy[i].Load())
	}
	return s
}

// Settle waits until every Route call started before it has returned and
// been counted. A reply a replica sent just before it was killed is counted
// by the calling goroutine after the reply arrives, so Stats taken right
// after the kill could miss it and a later Stats would put it after the kill;
// Settle then Stats counts it before.
func (g *Gateway) Settle() {
	g.callsMu.Lock()
	old := g.calls
	g.calls = new(sync.WaitGroup)
	g.callsMu.Unlock()
	old.Wait()
}

// startCall registers a Route call for Settle; the caller calls Done on
// the result once the call is counted.
func (g *Gateway) startCall() *sync.WaitGroup {
	g.callsMu.Lock()
	defer g.callsMu.Unlock()
	g.calls.Add(1)
	return g.calls
}

// RoutesInFlight is the number of Route calls not yet answered.
func (g *Gateway) RoutesInFlight() int64 { return g.routesInFlight.Load() }

func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// call runs fn against the replicas from start on until one answers or fails
// with an error that is not the replica's unavailability. It returns the
// replica that answered.
func (g *Gateway) call(ctx context.Context, start int, retries *atomic.Int64,
	fn func(context.Context, kvrouterv1.RouterClient) error) (int, error) {
	n := len(g.clients)
	now := time.Now().UnixNano()
	live := 0
	for i := range g.downUntil {
		if g.downUntil[i].Load() <= now {
			live++
		}
	}
	var err error
	busy := 0
	for k := 0; k < n; k++ {
		i := (start + k) % n
		if live > 0 && g.downUntil[i].Load() > now {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, g.cfg.AttemptTimeout)
		err = fn(actx, g.clients[i])
		cancel()
		if status.Code(err) == codes.ResourceExhausted && busy < g.cfg.BusyRetries && g.backoff(ctx, busy) {
			// Busy is the fleet's state, not the replica's: the same
			// replica again, after a while, and no ejection.
			busy++
			g.busyRetries.Add(1)
			k--
			continue
		}
		if err == nil || !retryable(ctx, err) {
			return i, err
		}
		g.downUntil[i].Store(time.Now().Add(g.cfg.DownFor).UnixNano())
		retries.Add(1)
	}
	return -1, err
}

// backoff waits before busy retry number try (from 0): a random time up to
// BusyBackoff x 2^try, capped at 64 x BusyBackoff. It reports false when ctx
// ended first.
func (g *Gateway) backoff(ctx context.Context, try int) bool {
	d := time.Duration(rand.Int64N(int64(g.cfg.BusyBackoff<<min(try, 6)) + 1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (g *Gateway) nextStart(turn *atomic.Uint64) int {
	return int((turn.Add(1) - 1) % uint64(len(g.clients)))
}

// spread is the replica a mark goes to under MarksSpread: FNV-1a of the
// request id and the mark.
func (g *Gateway) spread(id string, finished bool) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint64(id[i])) * 1099511628211
	}
	if finished {
		h = (h ^ 'f') * 1099511628211
	}
	h ^= h >> 29 // FNV's low bits mix poorly for short keys
	return int(h % uint64(len(g.clients)))
}

// Route asks the replicas' Route in turn, starting at the next in
// round-robin (or at replica 0 with RoutesToFirst), and returns the answer
// with the time it took, retries included.
func (g *Gateway) Route(ctx context.Context, req *kvrouterv1.RouteRequest) (*kvrouterv1.RouteResponse, time.Duration, error) {
	call := g.startCall()
	defer call.Done() // (after the counters below)
	g.routes.Add(1)
	g.routesInFlight.Add(1)
	var resp *kvrouterv1.RouteResponse
	t0 := time.Now()
	start := 0
	if !g.cfg.RoutesToFirst {
		start = g.nextStart(&g.next)
	}
	i, err := g.call(ctx, start, &g.routeRetries, func(ctx context.Context, c kvrouterv1.RouterClient) error {
		var err error
		resp, err = c.Route(ctx, req)
		return err
	})
	lat := time.Since(t0)
	g.routesInFlight.Add(-1)
	if err != nil {
		if ctx.Err() == nil {
			g.routeFailed.Add(1)
		}
		return nil, lat, fmt.Errorf("route: %w", err)
	}
	g.routesBy[i].Add(1)
	if g.cfg.Marks == MarksOrigin {
		g.origin.Store(req.RequestId, i)
	}
	return resp, lat, nil
}

// Marks is the RouterClient whose MarkPrefillDone and MarkFinished go
// through the gateway (for replay.PlayConfig.Router). Its other methods are not
// implemented and panic.
func (g *Gateway) Marks() kvrouterv1.RouterClient { return gatewayMarks{g: g} }

type gatewayMarks struct {
	kvrouterv1.RouterClient // nil: only the marks are served
	g                       *Gateway
}

func (m gatewayMarks) MarkPrefillDone(ctx context.Context, in *kvrouterv1.RequestRef, _ ...grpc.CallOption) (*kvrouterv1.Ack, error) {
	return m.g.mark(ctx, in, false)
}

func (m gatewayMarks) MarkFinished(ctx context.Context, in *kvrouterv1.RequestRef, _ ...grpc.CallOption) (*kvrouterv1.Ack, error) {
	return m.g.mark(ctx, in, true)
}

func (g *Gateway) mark(ctx context.Context, in *kvrouterv1.RequestRef, finished bool) (*kvrouterv1.Ack, error) {
	g.marks.Add(1)
	start := -1
	if g.cfg.Marks == MarksOrigin {
		if v, ok := g.origin.Load(in.RequestId); ok {
			start = v.(int)
		}
		if finished {
			g.origin.Delete(in.RequestId)
		}
	}
	if start < 0 {
		start = g.spread(in.RequestId, finished)
	}
	var ack *kvrouterv1.Ack
	_, err := g.call(ctx, start, &g.markRetries, func(ctx context.Context, c kvrouterv1.RouterClient) error {
		var err error
		if finished {
			ack, err = c.MarkFinished(ctx, in)
		} else {
			ack, err = c.MarkPrefillDone(ctx, in)
		}
		return err
	})
	switch {
	case err == nil:
	case status.Code(err) == codes.NotFound:
		g.marksNotFound.Add(1)
	case ctx.Err() == nil:
		g.marksFailed.Add(1)
	}
	return ack, err
}
