// Package load is the Route load generator of `kvbench load`: a router
// (started here, or one already running) indexes a fleet of simulated
// engines filled with synthetic documents, then Route requests are sent
// open-loop at a target rate while the engines keep publishing, and the
// latency, service time and the router's CPU per Route are reported.
//
// load.go has the configuration and the driver, fleet.go the engines and
// their fill, generate.go the open-loop client, report.go the text report.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/stats"
	"github.com/kvrouter/kvrouter/internal/normalize"
)

// Prompt forms: what a Route request carries.
const (
	FormTokens = "tokens" // token_ids
	FormHashes = "hashes" // block_hashes the client computed
)

// Config is one load run. The flag names of `kvbench load` are given where
// the meaning is theirs.
type Config struct {
	// RouterAddr is a running router's gRPC address; empty: RouterBin is
	// started on free ports with RouterArgs, its log to RouterLog (nil:
	// discarded).
	RouterAddr string
	RouterBin  string
	RouterArgs []string
	RouterLog  io.Writer

	Engines, DP  int // workers and data-parallel ranks per worker
	Fill         int // blocks each rank holds (0: no fleet)
	Docs, Groups int // documents in the pool, groups sharing a 64-block prefix
	PromptTokens int
	Rate         float64 // target Routes per second
	Duration     time.Duration
	Warmup       time.Duration
	Clients      int
	Conns        int
	MaxCand      uint
	Churn        float64 // documents per second re-served during the run
	Model        string
	FillTimeout  time.Duration
	Format       engine.Format
	Stream       bool   // RouteStream, one per client, instead of unary Route
	Form         string // FormTokens or FormHashes
	Idle         time.Duration
	Null         bool // the transport baseline: an unserved model

	// Out receives the report, Progress a timestamped line per phase.
	Out, Progress io.Writer
}

// ErrConfig is returned, wrapped, for a Config that cannot run.
var ErrConfig = errors.New("load: invalid config")

func (c *Config) pool() docPool {
	return docPool{Docs: c.Docs, Groups: c.Groups, DocBlocks: 512, SharedBlocks: 64, BlockSize: 16}
}

func (c *Config) validate() error {
	if c.Form != FormTokens && c.Form != FormHashes {
		return fmt.Errorf("%w: prompt-form %q: want tokens or hashes", ErrConfig, c.Form)
	}
	p := c.pool()
	if c.PromptTokens <= 0 || c.PromptTokens%16 != 0 || c.PromptTokens > p.DocBlocks*16 {
		return fmt.Errorf("%w: prompt-tokens %d: want a positive multiple of 16 up to %d", ErrConfig, c.PromptTokens, p.DocBlocks*16)
	}
	if c.Conns <= 0 {
		return fmt.Errorf("%w: conns %d: want at least 1", ErrConfig, c.Conns)
	}
	if c.Out == nil || c.Progress == nil {
		return fmt.Errorf("%w: Out and Progress must be set", ErrConfig)
	}
	return nil
}

// run is one Run's state.
type run struct {
	cfg    Config
	pool   docPool
	logf   func(string, ...any)
	addr   string
	router *harness.Router // nil for a router already running
}

// Run runs the load test and writes its report to cfg.Out.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	r := &run{cfg: cfg, pool: cfg.pool(), addr: cfg.RouterAddr}
	r.logf = func(format string, a ...any) {
		fmt.Fprintf(cfg.Progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}
	if r.addr == "" {
		var err error
		r.router, err = harness.StartRouter(ctx, harness.RouterConfig{Bin: cfg.RouterBin, Args: cfg.RouterArgs, Log: cfg.RouterLog})
		if err != nil {
			return err
		}
		// Stopped explicitly before the fleet closes (below), and here on early returns.
		defer r.router.Stop()
		r.addr = r.router.GRPCAddr
		r.logf("router started on %s (http %s)", r.router.GRPCAddr, r.router.HTTPAddr)
	}
	cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial router %s: %w", r.addr, err)
	}
	defer cc.Close()
	reg := kvrouterv1.NewRegistryClient(cc)

	if cfg.Fill > 0 && cfg.Engines > 0 {
		fleet, err := r.startFleet(ctx, reg)
		if err != nil {
			return err
		}
		defer func() {
			if r.router != nil {
				r.router.Stop() // first, so the router does not log 1,000 disconnects
			}
			fleet.close()
		}()
		if cfg.Churn > 0 {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			fleet.churn(cctx, r.pool, cfg.Churn)
		}
	}
	return r.measure(ctx, reg)
}

// startFleet starts, registers and fills the fleet, and waits until the
// router has indexed the fill.
func (r *run) startFleet(ctx context.Context, reg kvrouterv1.RegistryClient) (*loadFleet, error) {
	cfg := r.cfg
	r.logf("starting %d engines x %d ranks", cfg.Engines, cfg.DP)
	fleet, err := startLoadFleet(cfg.Engines, cfg.DP, cfg.Fill, cfg.Format)
	if err != nil {
		return nil, err
	}
	if err := fleet.register(ctx, reg, cfg.Model, cfg.DP); err != nil {
		fleet.close()
		return nil, err
	}
	r.logf("all %d ranks subscribed; filling %d blocks each", cfg.Engines*cfg.DP, cfg.Fill)
	t0 := time.Now()
	published, err := fleet.fill(r.pool, cfg.Fill)
	if err != nil {
		fleet.close()
		return nil, err
	}
	r.logf("published %d block stores in %v; waiting for the router to index them", published, time.Since(t0).Round(time.Millisecond))
	have, ranks, err := fleet.waitIndexed(ctx, reg, cfg.Model, cfg.FillTimeout)
	if err != nil {
		fleet.close()
		return nil, err
	}
	r.logf("router holds %d (worker, block) entries over %d ranks after %v", have, ranks, time.Since(t0).Round(time.Millisecond))
	return fleet, nil
}

// prompts pre-marshals the RouteRequests the clients send in turn.
func (r *run) prompts() ([][]byte, error) {
	cfg := r.cfg
	const variants = 256
	reqs := make([][]byte, variants)
	rng := rand.New(rand.NewPCG(1, 2))
	model := cfg.Model
	if cfg.Null {
		model = nullModel(model)
	}
	for i := range reqs {
		toks := r.pool.tokens(rng.IntN(r.pool.Docs), nil)[:cfg.PromptTokens]
		p := &kvrouterv1.Prompt{Model: model, TokenIds: toks}
		if cfg.Form == FormHashes {
			// The router block hash a gateway computes (README); the router's
			// own implementation is the reference.
			p = &kvrouterv1.Prompt{Model: model, BlockHashes: normalize.HashPrompt(normalize.Seed("", ""), toks, r.pool.BlockSize, nil, nil)}
		}
		b, err := proto.Marshal(&kvrouterv1.RouteRequest{Prompt: p, MaxCandidates: uint32(cfg.MaxCand)})
		if err != nil {
			return nil, fmt.Errorf("marshal prompt: %w", err)
		}
		reqs[i] = b
	}
	return reqs, nil
}

// measure sends the load on cfg.Conns raw-codec connections and reports it.
func (r *run) measure(ctx context.Context, reg kvrouterv1.RegistryClient) error {
	cfg := r.cfg
	reqs, err := r.prompts()
	if err != nil {
		return err
	}
	cs := make([]*grpc.ClientConn, cfg.Conns)
	for i := range cs {
		if cs[i], err = grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(replay.RawCodec{}))); err != nil {
			return fmt.Errorf("dial router %s: %w", r.addr, err)
		}
		defer cs[i].Close()
	}
	idleCores, err := routerIdle(ctx, r.router, cfg.Idle)
	if err != nil {
		return err
	}
	applied0, _ := harness.EventsApplied(ctx, reg, cfg.Model)
	res, err := generate(ctx, genConfig{
		conns: cs, reqs: reqs, rate: cfg.Rate, warmup: cfg.Warmup, duration: cfg.Duration,
		clients: cfg.Clients, stream: cfg.Stream, null: cfg.Null, router: r.router,
	})
	if err != nil {
		return err
	}
	applied1, _ := harness.EventsApplied(ctx, reg, cfg.Model)
	r.report(res, len(reqs[0]), applied1-applied0, idleCores)
	return nil
}

// report prints the run's figures.
func (r *run) report(res *loadResult, reqBytes int, applied uint64, idleCores float64) {
	cfg, w := r.cfg, r.cfg.Out
	lat, svc := stats.Summarize(res.latency), stats.Summarize(res.service)
	call := "unary Route"
	if cfg.Stream {
		call = "RouteStream, a stream per client"
	}
	if cfg.Null {
		call += ", for an unserved model (the transport baseline: NotFound counts as done)"
	}
	fmt.Fprintf(w, "Route load: %d-token prompts sent as %s (%d bytes), %s, %d clients over %d connections, target %.0f/s for %v (after %v warm-up)\n",
		cfg.PromptTokens, cfg.Form, reqBytes, call, cfg.Clients, cfg.Conns, cfg.Rate, cfg.Duration, cfg.Warmup)
	fmt.Fprintf(w, "  sent %d, errors %d, achieved %.0f/s; matched blocks per prompt: mean %.0f\n",
		res.done, res.errors, res.achieved, res.meanMatched)
	fmt.Fprintf(w, "  latency from schedule: p50 %v  p99 %v  p999 %v  max %v\n", lat.P50, lat.P99, lat.P999, lat.Max)
	fmt.Fprintf(w, "  service time:          p50 %v  p99 %v  p999 %v  max %v\n", svc.P50, svc.P99, svc.P999, svc.Max)
	fmt.Fprintf(w, "  events applied by the router during the run: %d (%.0f/s)\n", applied,
		float64(applied)/(cfg.Duration+cfg.Warmup).Seconds())
	if res.routerCPU > 0 && res.done > 0 {
		// Over the measured window: Route handling, gRPC and the events applied meanwhile.
		per := res.routerCPU / time.Duration(res.done)
		fmt.Fprintf(w, "  router CPU: %.2f cores, %v per Route (gRPC, Route and the events applied meanwhile): one core serves %.0f/s; kvbench itself %.2f cores\n",
			res.routerCPU.Seconds()/res.measured.Seconds(), per, float64(time.Second)/float64(per), res.selfCPU.Seconds()/res.measured.Seconds())
		if idleCores > 0 {
			// The same window's CPU less what the router spent without Routes.
			net := (res.routerCPU - time.Duration(idleCores*float64(res.measured))) / time.Duration(res.done)
			fmt.Fprintf(w, "  router CPU without Routes (events, subscriptions), measured for %v before: %.3f cores; net of it, %v per Route: one core serves %.0f/s\n",
				cfg.Idle, idleCores, net, float64(time.Second)/float64(max(net, 1)))
		}
	}
	if res.firstErr != "" {
		fmt.Fprintf(w, "  first error: %s\n", res.firstErr)
	}
}
