package load

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/harness"
)

// routerIdle measures the started router's CPU, in cores, over d with no
// Routes sent (0 when there is no started router or d is 0).
func routerIdle(ctx context.Context, router *harness.Router, d time.Duration) (float64, error) {
	if router == nil || d <= 0 {
		return 0, nil
	}
	c0, err := router.CPUTime()
	if err != nil {
		return 0, nil // (not measured off Linux)
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	c1, err := router.CPUTime()
	if err != nil {
		return 0, err
	}
	return (c1 - c0).Seconds() / time.Since(t0).Seconds(), nil
}

// nullModel is the model --null sends: one no worker serves.
func nullModel(model string) string { return model + "-null" }

// routeCaller returns a function that sends one pre-marshaled RouteRequest
// on conn and returns the answer's matched blocks: a unary Route call, or
// with stream an item on a RouteStream of its own (closed by the returned
// close function).
func routeCaller(ctx context.Context, conn *grpc.ClientConn, stream bool) (func(*[]byte) (uint32, error), func(), error) {
	if !stream {
		resp := new(kvrouterv1.RouteResponse)
		return func(req *[]byte) (uint32, error) {
			resp.Reset()
			err := conn.Invoke(ctx, kvrouterv1.Router_Route_FullMethodName, req, resp)
			return resp.MatchedBlocks, err
		}, func() {}, nil
	}
	sctx, cancel := context.WithCancel(ctx)
	st, err := conn.NewStream(sctx, &kvrouterv1.Router_ServiceDesc.Streams[0], kvrouterv1.Router_RouteStream_FullMethodName)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("open RouteStream: %w", err)
	}
	resp := new(kvrouterv1.RouteStreamResponse)
	return func(req *[]byte) (uint32, error) {
			if err := st.SendMsg(req); err != nil {
				return 0, err
			}
			resp.Reset()
			if err := st.RecvMsg(resp); err != nil {
				return 0, err
			}
			if resp.Code != 0 {
				return 0, status.Error(codes.Code(resp.Code), resp.Message)
			}
			return resp.Response.GetMatchedBlocks(), nil
		}, func() {
			_ = st.CloseSend()
			cancel()
		}, nil
}

// selfCPU returns the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type loadResult struct {
	latency, service []time.Duration
	done, errors     int64
	achieved         float64
	meanMatched      float64
	firstErr         string
	// CPU time over the measured window (after the warm-up), when known.
	routerCPU, selfCPU time.Duration
	measured           time.Duration
}

// genConfig is one open-loop run of generate.
type genConfig struct {
	conns            []*grpc.ClientConn
	reqs             [][]byte
	rate             float64
	warmup, duration time.Duration
	clients          int
	stream, null     bool
	router           *harness.Router // nil: the router's CPU is not measured
}

// generator is the state the clients of one generate run share.
type generator struct {
	cfg          genConfig
	start        time.Time
	interval     time.Duration
	total, warmN int64
	next         atomic.Int64

	mu                sync.Mutex
	res               *loadResult
	matched, measured int64
	lastDone          time.Time
}

// clientResult is one client's share of the measured requests.
type clientResult struct {
	lat, svc    []time.Duration
	m, errs, n  int64
	firstErr    string
	setupFailed bool
}

// generate sends Route requests open-loop: request i is due at start +
// i/rate; latency counts from the due time, so a stalled server cannot hide
// its queue (no coordinated omission).
// With stream, each client sends its requests on a RouteStream of its own,
// one at a time (the next after the answer), instead of as unary calls. With
// null, the requests are for an unserved model and NotFound is their answer.
func generate(ctx context.Context, cfg genConfig) (*loadResult, error) {
	if cfg.rate <= 0 || cfg.clients <= 0 {
		return nil, errors.New("load: rate and clients must be positive")
	}
	g := &generator{
		cfg:      cfg,
		interval: time.Duration(float64(time.Second) / cfg.rate),
		total:    int64((cfg.warmup + cfg.duration).Seconds() * cfg.rate),
		warmN:    int64(cfg.warmup.Seconds() * cfg.rate),
		start:    time.Now().Add(50 * time.Millisecond),
		res:      &loadResult{},
	}
	// CPU time is sampled when the warm-up ends and when the last request is done.
	var (
		cpuMu          sync.Mutex
		router0, self0 time.Duration
		sampled        bool
	)
	warmEnd := time.AfterFunc(time.Until(g.start.Add(cfg.warmup)), func() {
		cpuMu.Lock()
		defer cpuMu.Unlock()
		if cfg.router != nil {
			router0, _ = cfg.router.CPUTime()
		}
		self0, sampled = selfCPU(), true
	})
	defer warmEnd.Stop()
	var wg sync.WaitGroup
	for c := 0; c < cfg.clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			g.add(g.client(ctx, c))
		}(c)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := g.res
	cpuMu.Lock()
	if sampled {
		res.measured = g.lastDone.Sub(g.start.Add(cfg.warmup))
		res.selfCPU = selfCPU() - self0
		if cfg.router != nil {
			if c, err := cfg.router.CPUTime(); err == nil && router0 > 0 {
				res.routerCPU = c - router0
			}
		}
	}
	cpuMu.Unlock()
	if el := g.lastDone.Sub(g.start.Add(cfg.warmup)); el > 0 {
		res.achieved = float64(res.done) / el.Seconds()
	}
	if g.measured > 0 {
		res.meanMatched = float64(g.matched) / float64(g.measured)
	}
	return res, nil
}

// client takes the next due request until all are sent, each on its own
// schedule; requests of the warm-up are sent but not counted.
func (g *generator) client(ctx context.Context, c int) clientResult {
	var r clientResult
	call, closeCall, err := routeCaller(ctx, g.cfg.conns[c%len(g.cfg.conns)], g.cfg.stream)
	if err != nil {
		r.setupFailed, r.errs, r.firstErr = true, 1, err.Error()
		return r
	}
	defer closeCall()
	for {
		i := g.next.Add(1) - 1
		if i >= g.total || ctx.Err() != nil {
			return r
		}
		due := g.start.Add(time.Duration(i) * g.interval)
		// Open loop: the client waits for the request's due time, it is
		// the schedule, not a synchronization.
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		sent := time.Now()
		matched, err := call(&g.cfg.reqs[i%int64(len(g.cfg.reqs))])
		end := time.Now()
		if g.cfg.null && status.Code(err) == codes.NotFound {
			err = nil
		}
		if i < g.warmN {
			continue
		}
		r.n++
		if err != nil {
			r.errs++
			if r.firstErr == "" {
				r.firstErr = err.Error()
			}
			continue
		}
		r.lat = append(r.lat, end.Sub(due))
		r.svc = append(r.svc, end.Sub(sent))
		r.m += int64(matched)
	}
}

// add merges one client's result.
func (g *generator) add(r clientResult) {
	g.mu.Lock()
	defer g.mu.Unlock()
	res := g.res
	res.errors += r.errs
	if res.firstErr == "" {
		res.firstErr = r.firstErr
	}
	if r.setupFailed {
		return
	}
	res.latency = append(res.latency, r.lat...)
	res.service = append(res.service, r.svc...)
	res.done += r.n
	g.matched += r.m
	g.measured += int64(len(r.lat))
	if now := time.Now(); now.After(g.lastDone) {
		g.lastDone = now
	}
}
