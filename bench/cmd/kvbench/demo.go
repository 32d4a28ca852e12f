package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/sweep"
	"github.com/kvrouter/kvrouter/bench/trace"
)

// demoTrace is the first 300 requests of the Mooncake conversation trace
// (kvcache-ai/Mooncake, FAST25-release/traces, Apache-2.0), so that `make run`
// works from a clone without ../shared/.
//
//go:embed demo_trace.jsonl
var demoTrace []byte

// loadDemoTrace reads the trace at path, or the embedded slice when there is
// no file there.
func loadDemoTrace(path string, limit, idTokens int, log *slog.Logger) ([]trace.Request, error) {
	if _, err := os.Stat(path); err == nil {
		return trace.LoadBlocks(path, limit, idTokens)
	}
	log.Info("trace file not found; using the embedded 300-request slice of the Mooncake conversation trace", "path", path)
	return trace.Parse(bytes.NewReader(demoTrace), limit)
}

// demoChat is a generated multi-turn chat trace (five minutes after a
// two-minute warm-up, the generator's defaults otherwise) whose arrivals are
// stretched so that its prefill work is load of what engines can do.
func demoChat(engines int, prefillPerToken time.Duration, load float64) ([]trace.Request, error) {
	if load <= 0 {
		return nil, fmt.Errorf("demo: --load %v must be > 0", load)
	}
	tr, err := sweep.Generate("chat", "", 1, 5*time.Minute, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	reqs, _ := sweep.ScaleLoad(tr.Reqs, engines, prefillPerToken, load)
	return reqs, nil
}

// runDemo starts the router and a few simulated engines and replays a trace
// slice in a loop until ctx ends, and the same slice round-robin on a
// second fleet, printing a line that compares the two every few seconds.
// It is longer than ~80 lines for its flag list, one line per flag.
func runDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("kvbench demo", flag.ContinueOnError)
	var (
		workload  = fs.String("workload", "chat", "chat: a generated multi-turn chat trace (kvbench gen --shape chat) at --load; trace: the first --requests of the Mooncake trace at its own pace")
		load      = fs.Float64("load", 0.8, "with --workload chat: offered prefill load on the fleet (1: round-robin's capacity)")
		tracePath = fs.String("trace", defaultTrace, "Mooncake JSONL trace, with --workload trace")
		slice     = fs.Int("requests", 300, "requests of the trace replayed per pass, with --workload trace")
		idTokens  = traceBlockTokens(fs)
		engines   = fs.Int("engines", 4, "simulated engines")
		capacity  = fs.Int("capacity", 8192, "cache capacity per engine, in 16-token blocks")
		speedUp   = fs.Float64("speed-up", 10, "replay speed-up over trace time")
		routerBin = fs.String("router-bin", "bin/kvrouter", "router binary")
		routerArg = fs.String("router-args", "", "extra router flags, space-separated")
		grpcAddr  = fs.String("grpc-addr", ":50051", "router gRPC listen address")
		httpAddr  = fs.String("http-addr", ":9090", "router HTTP listen address")
		every     = fs.Duration("log-every", 5*time.Second, "how often the comparison line is printed")
		model     = fs.String("model", "bench-model", "model name the engines serve")
		replicas  = fs.Int("replicas", 1, "routers; 2 or more start an embedded NATS server and run them in cluster mode (--nats-url), replica i on the gRPC and HTTP ports + i, behind a round-robin gateway")
		natsPort  = fs.Int("nats-port", 0, "the embedded NATS server's port with --replicas (0: a random free port)")
		compare   = fs.Bool("compare", true, "replay the same trace round-robin on a second, identical fleet and print both side by side")
		tm        timeModel
	)
	tm.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	reqs, err := demoWorkload(*workload, *engines, tm.prefill, *load, *tracePath, *slice, *idTokens, log)
	if err != nil {
		return err
	}
	if len(reqs) == 0 {
		return errors.New("demo: empty trace slice")
	}
	em, err := tm.engineModel()
	if err != nil {
		return err
	}
	fleetCfg := harness.FleetConfig{
		Engines: *engines, Replay: true,
		Engine: engine.Config{CapacityBlocks: *capacity, PrefillPerToken: tm.prefill, DecodePerToken: tm.decode,
			Model: em, MaxNumBatchedTokens: tm.maxBatched, MaxNumSeqs: tm.maxNumSeq},
	}
	fleet, err := harness.StartFleet(fleetCfg)
	if err != nil {
		return err
	}
	defer fleet.Close()
	rc := harness.RouterConfig{Bin: *routerBin, GRPCAddr: *grpcAddr, HTTPAddr: *httpAddr,
		Args: strings.Fields(*routerArg), Log: os.Stderr}
	var be *demoBackend
	if *replicas > 1 {
		be, err = startDemoReplicas(ctx, rc, *replicas, *natsPort, fleet, *model, log)
	} else {
		be, err = startDemoRouter(ctx, rc, fleet, *model, log)
	}
	if err != nil {
		return err
	}
	defer be.close()
	log.Info("demo running", "routers", len(be.grpc), "engines", *engines, "requests_per_pass", len(reqs))
	printTryCommands(be, *model, reqs[0])

	kv := &side{name: "kvrouter", fleet: fleet}
	clock := replay.Clock{T0: time.Now(), SpeedUp: *speedUp}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	var rr *side
	if *compare {
		var closeRR func()
		if rr, closeRR, err = startRoundRobin(ctx, &wg, fleetCfg, reqs, clock, *engines, log); err != nil {
			return err
		}
		defer closeRR()
	}
	fmt.Fprint(out, comparisonHeader(*every))
	wg.Add(1)
	go func() {
		defer wg.Done()
		printComparisons(ctx, out, *every, kv, rr, be, log)
	}()
	err = playLoop(ctx, kv, reqs, clock, be.choose, be.marks, be.exited, log)
	if ctx.Err() != nil {
		log.Info("stopping")
	}
	cancel()
	return err
}

// startRoundRobin starts the baseline: an identical fleet no router
// follows, the same trace on the same clock, engines chosen round-robin.
// The returned function closes its fleet.
func startRoundRobin(ctx context.Context, wg *sync.WaitGroup, fleetCfg harness.FleetConfig, reqs []trace.Request, clock replay.Clock, engines int, log *slog.Logger) (*side, func(), error) {
	rrFleet, err := harness.StartFleet(fleetCfg)
	if err != nil {
		return nil, nil, err
	}
	rr := &side{name: "round-robin", fleet: rrFleet}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := playLoop(ctx, rr, reqs, clock, replay.RoundRobin(engines), nil, nil, log); err != nil {
			log.Error("round-robin replay stopped", "err", err)
		}
	}()
	return rr, rrFleet.Close, nil
}

// demoWorkload is the demo's requests: a generated chat trace at load, or
// the first slice requests of the Mooncake trace.
func demoWorkload(workload string, engines int, prefill time.Duration, load float64, tracePath string, slice, idTokens int, log *slog.Logger) ([]trace.Request, error) {
	var (
		reqs []trace.Request
		err  error
	)
	switch workload {
	case "chat":
		reqs, err = demoChat(engines, prefill, load)
	case "trace":
		reqs, err = loadDemoTrace(findTrace(tracePath), slice, idTokens, log)
	default:
		err = fmt.Errorf("demo: --workload %q: want chat or trace", workload)
	}
	return reqs, err
}

// printComparisons prints the comparison line (and, with replicas, the
// gateway's counters) every interval until ctx ends.
func printComparisons(ctx context.Context, out io.Writer, every time.Duration, kv, rr *side, be *demoBackend, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if rr != nil {
			fmt.Fprintln(out, comparisonLine(kv.stats(), rr.stats()))
		} else {
			fmt.Fprintln(out, comparisonLine(kv.stats(), sideStats{Name: "round-robin (off)"}))
		}
		if be.gw != nil {
			g := be.gw.Stats()
			log.Info("gateway", "routes_per_replica", fmt.Sprint(g.RoutesPerReplica), "marks", g.Marks,
				"marks_not_found", g.MarksNotFound, "retries", g.RouteRetries+g.MarkRetries)
		}
	}
}

func printTryCommands(be *demoBackend, model string, r trace.Request) {
	toks := r.Tokens(nil)[:48]
	ids := make([]string, len(toks))
	for i, t := range toks {
		ids[i] = fmt.Sprint(t)
	}
	local := func(a string) string { return strings.Replace(a, "127.0.0.1", "localhost", 1) }
	g := local(be.grpc[0])
	var b strings.Builder
	fmt.Fprintf(&b, `
Try it (in another terminal):
  grpcurl -plaintext %[1]s list
  grpcurl -plaintext -d '{"model":"%[2]s"}' %[1]s kvrouter.v1.Registry/ListWorkers
  grpcurl -plaintext -d '{"prompt":{"model":"%[2]s","token_ids":[%[3]s]}}' %[1]s kvrouter.v1.Router/Score
  grpcurl -plaintext -d '{"prompt":{"model":"%[2]s","token_ids":[%[3]s]}}' %[1]s kvrouter.v1.Router/Route
  curl -s http://%[4]s/metrics | grep '^kvrouter_'
  status page (workers and ranks, routing gain, recent decisions): http://%[4]s/status
(The token ids are the first 48 tokens of the trace's shared prefix, so every engine that served
a request holds them.)
`, g, model, strings.Join(ids, ","), local(be.http[0]))
	if len(be.grpc) > 1 {
		fmt.Fprintf(&b, `
%d replicas share NATS at %s (JetStream in %s); each is a full router:
`, len(be.grpc), be.nats.URL(), be.nats.StoreDir())
		for i := range be.grpc {
			fmt.Fprintf(&b, "  %s  grpcurl -plaintext %s grpc.health.v1.Health/Check; curl -s http://%s/metrics | grep '^kvrouter_'\n",
				harness.ReplicaID(i), local(be.grpc[i]), local(be.http[i]))
		}
		fmt.Fprintf(&b, `A worker registered on one replica is listed by all, e.g.
  grpcurl -plaintext -d '{"worker":{"worker_id":"extra","model":"%[1]s","endpoint":"sim://extra","kv_events_endpoint":"tcp://127.0.0.1:1","dp_size":1,"block_size":16}}' %[2]s kvrouter.v1.Registry/RegisterWorker
  grpcurl -plaintext -d '{"model":"%[1]s"}' %[3]s kvrouter.v1.Registry/ListWorkers
  grpcurl -plaintext -d '{"worker_id":"extra"}' %[3]s kvrouter.v1.Registry/UnregisterWorker
and a request routed by one replica can be finished on another:
  grpcurl -plaintext -d '{"request_id":"try-1","prompt":{"model":"%[1]s","token_ids":[%[4]s]}}' %[2]s kvrouter.v1.Router/Route
  grpcurl -plaintext -d '{"request_id":"try-1"}' %[3]s kvrouter.v1.Router/MarkFinished
`, model, local(be.grpc[0]), local(be.grpc[1]), strings.Join(ids, ","))
	}
	b.WriteString("Stop with Ctrl-C.\n\n")
	fmt.Fprint(os.Stderr, b.String())
}

// demoBackend is the router side of the demo: one router, or replicas on an
// embedded NATS server behind a gateway.
type demoBackend struct {
	choose     replay.ChooseFunc
	marks      kvrouterv1.RouterClient
	grpc, http []string
	routers    []*harness.Router
	gw         *replay.Gateway
	nats       *harness.NATS
	log        *slog.Logger
}

func startDemoRouter(ctx context.Context, rc harness.RouterConfig, fleet *harness.Fleet, model string, log *slog.Logger) (*demoBackend, error) {
	router, err := harness.StartRouter(ctx, rc)
	if err != nil {
		return nil, err
	}
	be := &demoBackend{routers: []*harness.Router{router}, log: log,
		grpc: []string{router.GRPCAddr}, http: []string{router.HTTPAddr},
		choose: replay.RouterChooser(router.Router, fleet, model), marks: router.Router}
	if err := fleet.Register(ctx, router.Registry, model, 20*time.Second); err != nil {
		be.close()
		return nil, err
	}
	return be, nil
}

func startDemoReplicas(ctx context.Context, rc harness.RouterConfig, n, natsPort int, fleet *harness.Fleet, model string, log *slog.Logger) (_ *demoBackend, err error) {
	be := &demoBackend{log: log}
	defer func() {
		if err != nil {
			be.close()
		}
	}()
	if be.nats, err = harness.StartNATS(natsPort); err != nil {
		return nil, err
	}
	log.Info("embedded NATS server", "url", be.nats.URL(), "jetstream_dir", be.nats.StoreDir())
	reps, err := harness.StartReplicas(ctx, harness.ReplicasConfig{N: n, Router: rc, NATSURL: be.nats.URL()})
	if err != nil {
		return nil, err
	}
	be.routers = reps.Routers
	for _, r := range reps.Routers {
		be.grpc, be.http = append(be.grpc, r.GRPCAddr), append(be.http, r.HTTPAddr)
	}
	if err = reps.Register(ctx, fleet, model, 20*time.Second); err != nil {
		return nil, err
	}
	if be.gw, err = replay.NewGateway(replay.GatewayConfig{Addrs: be.grpc}); err != nil {
		return nil, err
	}
	be.choose, be.marks = be.gw.Chooser(fleet, model), be.gw.Marks()
	return be, nil
}

// exited reports a router that has exited.
func (be *demoBackend) exited() error {
	for i, r := range be.routers {
		select {
		case <-r.Exited():
			return fmt.Errorf("router %d exited: %v", i, r.ExitErr())
		default:
		}
	}
	return nil
}

func (be *demoBackend) close() {
	if be.gw != nil {
		be.gw.Close()
	}
	for _, r := range be.routers {
		if err := r.Stop(); err != nil {
			be.log.Warn("stop router", "err", err)
		}
	}
	if be.nats != nil {
		be.nats.Close()
	}
}
