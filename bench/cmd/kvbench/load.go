package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/stats"
	"github.com/kvrouter/kvrouter/internal/normalize"
)

// docPool describes the synthetic prompts of the load test: Docs documents
// of DocBlocks blocks each; documents of one group share their first
// SharedBlocks blocks (a system prompt).
type docPool struct {
	Docs, Groups, DocBlocks, SharedBlocks, BlockSize int
}

func mix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// tokens appends document d's tokens.
func (p docPool) tokens(d int, dst []uint32) []uint32 {
	g := d % p.Groups
	for b := 0; b < p.DocBlocks; b++ {
		src := uint64(1)<<62 | uint64(g)<<20 | uint64(b) // shared prefix block
		if b >= p.SharedBlocks {
			src = uint64(d)<<20 | uint64(b)
		}
		for i := 0; i < p.BlockSize; i++ {
			dst = append(dst, uint32(mix(src*64+uint64(i))%128000))
		}
	}
	return dst
}

// loadFleet is M engines with D data-parallel ranks each, every rank its own
// simulated engine on consecutive ports.
type loadFleet struct {
	workers [][]*engine.Engine // [worker][rank]
	bases   []int
}

func (f *loadFleet) close() {
	for _, w := range f.workers {
		for _, e := range w {
			e.Close()
		}
	}
}

func (f *loadFleet) each(fn func(w, r int, e *engine.Engine)) {
	for w, ranks := range f.workers {
		for r, e := range ranks {
			fn(w, r, e)
		}
	}
}

func startLoadFleet(m, d, capacity int, format engine.Format) (*loadFleet, error) {
	f := &loadFleet{}
	next := 20000 + rand.IntN(20000)
	for w := 0; w < m; w++ {
		var ranks []*engine.Engine
		for attempt := 0; ; attempt++ {
			if attempt > 200 {
				f.close()
				return nil, fmt.Errorf("no %d consecutive free ports for worker %d", d, w)
			}
			base := next
			next += d
			if next > 60000 {
				next = 20000
			}
			ranks = ranks[:0]
			ok := true
			for r := 0; r < d; r++ {
				e, err := engine.New(engine.Config{
					ID: fmt.Sprintf("load-%04d/%d", w, r), Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", base+r),
					DPRank: uint32(r), CapacityBlocks: capacity, Format: format,
					HashSeed: uint64(w*d+r)*0x9E3779B97F4A7C15 + 7,
				})
				if err != nil {
					ok = false
					break
				}
				ranks = append(ranks, e)
			}
			if ok {
				f.bases = append(f.bases, base)
				break
			}
			for _, e := range ranks {
				e.Close()
			}
		}
		f.workers = append(f.workers, ranks)
	}
	return f, nil
}

func runLoad(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kvbench load", flag.ContinueOnError)
	var (
		routerAddr = fs.String("router-addr", "", "existing router gRPC address (empty: start --router-bin on free ports)")
		routerBin  = fs.String("router-bin", "bin/kvrouter", "router binary")
		routerArg  = fs.String("router-args", "", "extra router flags, space-separated")
		workers    = fs.Int("engines", 125, "simulated engines (workers)")
		dp         = fs.Int("dp", 8, "data-parallel ranks per engine (each a PUB socket)")
		fill       = fs.Int("fill", 16384, "blocks each rank holds")
		docs       = fs.Int("docs", 4000, "distinct 8,192-token documents in the pool")
		groups     = fs.Int("groups", 64, "document groups sharing a 64-block prefix")
		promptTok  = fs.Int("prompt-tokens", 8192, "tokens per Route prompt (multiple of 16)")
		rate       = fs.Float64("rate", 10000, "target Route requests per second")
		duration   = fs.Duration("duration", 10*time.Second, "measured duration")
		warmup     = fs.Duration("warmup", 2*time.Second, "unmeasured warm-up at the target rate")
		clients    = fs.Int("clients", 64, "concurrent client goroutines")
		conns      = fs.Int("conns", 4, "gRPC connections")
		maxCand    = fs.Uint("max-candidates", 1, "RouteRequest.max_candidates (0: all)")
		churn      = fs.Float64("churn", 100, "documents per second re-served by random ranks during the run (store+evict events)")
		model      = fs.String("model", "load-model", "model name")
		fillWait   = fs.Duration("fill-timeout", 5*time.Minute, "how long to wait for the router to index the fill")
		format     = fs.String("format", "vllm-map", "event wire format")
		routerLog  = fs.String("router-log", "", "file for the started router's log (empty: discard)")
		stream     = fs.Bool("stream", false, "send Routes on RouteStream (one stream per client) instead of unary Route calls")
		form       = fs.String("prompt-form", "tokens", "what a Route sends: tokens (token_ids) or hashes (block_hashes the client computed)")
		idle       = fs.Duration("idle", 5*time.Second, "before the load, how long to measure the started router's CPU with no Routes (the fill done, the churn's events going on): Route's CPU is also given net of it (0: not measured)")
		null       = fs.Bool("null", false, "the transport baseline: send the same requests for a model no worker serves, which the router decodes and refuses (NotFound) before any routing work")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ef, err := engine.ParseFormat(*format)
	if err != nil {
		return err
	}
	if *form != "tokens" && *form != "hashes" {
		return fmt.Errorf("prompt-form %q: want tokens or hashes", *form)
	}
	pool := docPool{Docs: *docs, Groups: *groups, DocBlocks: 512, SharedBlocks: 64, BlockSize: 16}
	if *promptTok <= 0 || *promptTok%16 != 0 || *promptTok > pool.DocBlocks*16 {
		return fmt.Errorf("prompt-tokens %d: want a positive multiple of 16 up to %d", *promptTok, pool.DocBlocks*16)
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}

	addr := *routerAddr
	var router *replay.Router
	if addr == "" {
		rc := replay.RouterConfig{Bin: *routerBin, Args: strings.Fields(*routerArg)}
		if *routerLog != "" {
			lf, err := os.Create(*routerLog)
			if err != nil {
				return err
			}
			defer lf.Close()
			rc.Log = lf
		}
		router, err = replay.StartRouter(ctx, rc)
		if err != nil {
			return err
		}
		// Stopped explicitly before the fleet closes (below), and here on early returns.
		defer router.Stop()
		addr = router.GRPCAddr
		logf("router started on %s (http %s)", router.GRPCAddr, router.HTTPAddr)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	reg := kvrouterv1.NewRegistryClient(cc)

	// Fleet and fill.
	if *fill > 0 && *workers > 0 {
		logf("starting %d engines x %d ranks", *workers, *dp)
		fleet, err := startLoadFleet(*workers, *dp, *fill, ef)
		if err != nil {
			return err
		}
		defer func() {
			if router != nil {
				router.Stop() // first, so the router does not log 1,000 disconnects
			}
			fleet.close()
		}()
		for w, ranks := range fleet.workers {
			wk := &kvrouterv1.Worker{
				WorkerId: fmt.Sprintf("load-%04d", w), Model: *model, Endpoint: fmt.Sprintf("sim://load-%04d", w),
				KvEventsEndpoint: ranks[0].Endpoint(), DpSize: uint32(*dp), BlockSize: 16,
			}
			if _, err := reg.RegisterWorker(ctx, &kvrouterv1.RegisterWorkerRequest{Worker: wk}); err != nil {
				return fmt.Errorf("register %s: %w", wk.WorkerId, err)
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		var subErr error
		fleet.each(func(w, r int, e *engine.Engine) {
			for subErr == nil && !e.Publisher().Subscribed() {
				if time.Now().After(deadline) {
					subErr = fmt.Errorf("rank %s never subscribed", e.ID())
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
		if subErr != nil {
			return subErr
		}
		logf("all %d ranks subscribed; filling %d blocks each", *workers**dp, *fill)
		t0 := time.Now()
		var published atomic.Int64
		var wg sync.WaitGroup
		var fillErr atomic.Value
		rankCh := make(chan *engine.Engine)
		for g := 0; g < runtime.GOMAXPROCS(0); g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 99))
				var toks []uint32
				for e := range rankCh {
					for i := 0; e.Stats().CachedNow < *fill && i < 10*(*fill/448+1); i++ {
						toks = pool.tokens(rng.IntN(pool.Docs), toks[:0])
						if _, err := e.ServeAndPublish(engine.Request{Tokens: toks}); err != nil {
							fillErr.CompareAndSwap(nil, err)
						}
					}
					published.Add(int64(e.Stats().StoredBlocks))
				}
			}(g)
		}
		fleet.each(func(_, _ int, e *engine.Engine) { rankCh <- e })
		close(rankCh)
		wg.Wait()
		if v := fillErr.Load(); v != nil {
			return fmt.Errorf("fill: %w", v.(error))
		}
		logf("published %d block stores in %v; waiting for the router to index them", published.Load(), time.Since(t0).Round(time.Millisecond))
		var want uint64
		fleet.each(func(_, _ int, e *engine.Engine) { want += uint64(e.Stats().CachedNow) })
		deadline = time.Now().Add(*fillWait)
		for {
			resp, err := reg.ListWorkers(ctx, &kvrouterv1.ListWorkersRequest{Model: *model})
			if err != nil {
				return err
			}
			var have uint64
			for _, w := range resp.Workers {
				have += w.CachedBlocks
			}
			if have >= want {
				logf("router holds %d (worker, block) entries over %d ranks after %v", have, len(resp.Workers), time.Since(t0).Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("router indexed %d of %d blocks within %v", have, want, *fillWait)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
		// Churn: keep events flowing while Route is measured.
		if *churn > 0 {
			var ranks []*engine.Engine
			fleet.each(func(_, _ int, e *engine.Engine) { ranks = append(ranks, e) })
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() {
				rng := rand.New(rand.NewPCG(7, 7))
				interval := time.Duration(float64(time.Second) / *churn)
				t := time.NewTicker(interval)
				defer t.Stop()
				var toks []uint32
				for {
					select {
					case <-cctx.Done():
						return
					case <-t.C:
					}
					toks = pool.tokens(rng.IntN(pool.Docs), toks[:0])
					_, _ = ranks[rng.IntN(len(ranks))].ServeAndPublish(engine.Request{Tokens: toks})
				}
			}()
		}
	}

	// Pre-marshaled prompts.
	const variants = 256
	reqs := make([][]byte, variants)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range reqs {
		toks := pool.tokens(rng.IntN(pool.Docs), nil)[:*promptTok]
		m := *model
		if *null {
			m = nullModel(m)
		}
		p := &kvrouterv1.Prompt{Model: m, TokenIds: toks}
		if *form == "hashes" {
			// The router block hash a gateway computes (README); the router's
			// own implementation is the reference.
			p = &kvrouterv1.Prompt{Model: m, BlockHashes: normalize.HashPrompt(normalize.Seed("", ""), toks, pool.BlockSize, nil, nil)}
		}
		b, err := proto.Marshal(&kvrouterv1.RouteRequest{Prompt: p, MaxCandidates: uint32(*maxCand)})
		if err != nil {
			return err
		}
		reqs[i] = b
	}
	cs := make([]*grpc.ClientConn, *conns)
	for i := range cs {
		if cs[i], err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(replay.RawCodec{}))); err != nil {
			return err
		}
		defer cs[i].Close()
	}
	idleCores, err := routerIdle(ctx, router, *idle)
	if err != nil {
		return err
	}
	applied0, _ := replay.EventsApplied(ctx, reg, *model)
	res, err := generate(ctx, cs, reqs, *rate, *warmup, *duration, *clients, *stream, *null, router)
	if err != nil {
		return err
	}
	applied1, _ := replay.EventsApplied(ctx, reg, *model)
	lat, svc := stats.Summarize(res.latency), stats.Summarize(res.service)
	call := "unary Route"
	if *stream {
		call = "RouteStream, a stream per client"
	}
	if *null {
		call += ", for an unserved model (the transport baseline: NotFound counts as done)"
	}
	fmt.Printf("Route load: %d-token prompts sent as %s (%d bytes), %s, %d clients over %d connections, target %.0f/s for %v (after %v warm-up)\n",
		*promptTok, *form, len(reqs[0]), call, *clients, *conns, *rate, *duration, *warmup)
	fmt.Printf("  sent %d, errors %d, achieved %.0f/s; matched blocks per prompt: mean %.0f\n",
		res.done, res.errors, res.achieved, res.meanMatched)
	fmt.Printf("  latency from schedule: p50 %v  p99 %v  p999 %v  max %v\n", lat.P50, lat.P99, lat.P999, lat.Max)
	fmt.Printf("  service time:          p50 %v  p99 %v  p999 %v  max %v\n", svc.P50, svc.P99, svc.P999, svc.Max)
	fmt.Printf("  events applied by the router during the run: %d (%.0f/s)\n", applied1-applied0,
		float64(applied1-applied0)/(*duration+*warmup).Seconds())
	if res.routerCPU > 0 && res.done > 0 {
		// Over the measured window: Route handling, gRPC and the events applied meanwhile.
		per := res.routerCPU / time.Duration(res.done)
		fmt.Printf("  router CPU: %.2f cores, %v per Route (gRPC, Route and the events applied meanwhile): one core serves %.0f/s; kvbench itself %.2f cores\n",
			res.routerCPU.Seconds()/res.measured.Seconds(), per, float64(time.Second)/float64(per), res.selfCPU.Seconds()/res.measured.Seconds())
		if idleCores > 0 {
			// The same window's CPU less what the router spent without Routes.
			net := (res.routerCPU - time.Duration(idleCores*float64(res.measured))) / time.Duration(res.done)
			fmt.Printf("  router CPU without Routes (events, subscriptions), measured for %v before: %.3f cores; net of it, %v per Route: one core serves %.0f/s\n",
				*idle, idleCores, net, float64(time.Second)/float64(max(net, 1)))
		}
	}
	if res.firstErr != "" {
		fmt.Printf("  first error: %s\n", res.firstErr)
	}
	return nil
}

// routerIdle measures the started router's CPU, in cores, over d with no
// Routes sent (0 when there is no started router or d is 0).
func routerIdle(ctx context.Context, router *replay.Router, d time.Duration) (float64, error) {
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

// generate sends Route requests open-loop: request i is due at start +
// i/rate; latency counts from the due time, so a stalled server cannot hide
// its queue (no coordinated omission).
// With stream, each client sends its requests on a RouteStream of its own,
// one at a time (the next after the answer), instead of as unary calls. With
// null, the requests are for an unserved model and NotFound is their answer.
func generate(ctx context.Context, cs []*grpc.ClientConn, reqs [][]byte, rate float64, warmup, duration time.Duration, clients int, stream, null bool, router *replay.Router) (*loadResult, error) {
	if rate <= 0 || clients <= 0 {
		return nil, errors.New("load: rate and clients must be positive")
	}
	interval := time.Duration(float64(time.Second) / rate)
	total := int64((warmup + duration).Seconds() * rate)
	warmN := int64(warmup.Seconds() * rate)
	start := time.Now().Add(50 * time.Millisecond)
	var next atomic.Int64
	res := &loadResult{}
	var mu sync.Mutex
	var matched, measured int64
	var lastDone time.Time
	// CPU time is sampled when the warm-up ends and when the last request is done.
	var cpuMu sync.Mutex
	var router0, self0 time.Duration
	sampled := false
	warmEnd := time.AfterFunc(time.Until(start.Add(warmup)), func() {
		cpuMu.Lock()
		defer cpuMu.Unlock()
		if router != nil {
			router0, _ = router.CPUTime()
		}
		self0, sampled = selfCPU(), true
	})
	defer warmEnd.Stop()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			call, closeCall, err := routeCaller(ctx, cs[c%len(cs)], stream)
			if err != nil {
				mu.Lock()
				res.errors++
				if res.firstErr == "" {
					res.firstErr = err.Error()
				}
				mu.Unlock()
				return
			}
			defer closeCall()
			var lat, svc []time.Duration
			var m, errs, n int64
			var firstErr string
			for {
				i := next.Add(1) - 1
				if i >= total || ctx.Err() != nil {
					break
				}
				due := start.Add(time.Duration(i) * interval)
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				sent := time.Now()
				matched, err := call(&reqs[i%int64(len(reqs))])
				end := time.Now()
				if null && status.Code(err) == codes.NotFound {
					err = nil
				}
				if i < warmN {
					continue
				}
				n++
				if err != nil {
					errs++
					if firstErr == "" {
						firstErr = err.Error()
					}
					continue
				}
				lat = append(lat, end.Sub(due))
				svc = append(svc, end.Sub(sent))
				m += int64(matched)
			}
			mu.Lock()
			res.latency = append(res.latency, lat...)
			res.service = append(res.service, svc...)
			res.done += n
			res.errors += errs
			matched += m
			measured += int64(len(lat))
			if res.firstErr == "" {
				res.firstErr = firstErr
			}
			if now := time.Now(); now.After(lastDone) {
				lastDone = now
			}
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cpuMu.Lock()
	if sampled {
		res.measured = lastDone.Sub(start.Add(warmup))
		res.selfCPU = selfCPU() - self0
		if router != nil {
			if c, err := router.CPUTime(); err == nil && router0 > 0 {
				res.routerCPU = c - router0
			}
		}
	}
	cpuMu.Unlock()
	if el := lastDone.Sub(start.Add(warmup)); el > 0 {
		res.achieved = float64(res.done) / el.Seconds()
	}
	if measured > 0 {
		res.meanMatched = float64(matched) / float64(measured)
	}
	return res, nil
}
