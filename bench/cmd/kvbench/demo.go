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
	"time"

	"github.com/kvrouter/kvrouter/bench/demo"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/harness"
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

// runDemo starts the router and a few simulated engines and replays a trace
// slice in a loop until ctx ends, and the same slice round-robin on a
// second fleet, printing a line that compares the two every few seconds.
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
	return demo.Run(ctx, demo.Config{
		Requests: reqs, Fleet: fleetCfg,
		Router: harness.RouterConfig{Bin: *routerBin, GRPCAddr: *grpcAddr, HTTPAddr: *httpAddr,
			Args: strings.Fields(*routerArg), Log: os.Stderr},
		Replicas: *replicas, NATSPort: *natsPort, Model: *model, SpeedUp: *speedUp,
		Every: *every, Compare: *compare, Out: out, Try: os.Stderr, Log: log,
	})
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
		reqs, err = demo.Chat(engines, prefill, load)
	case "trace":
		reqs, err = loadDemoTrace(findTrace(tracePath), slice, idTokens, log)
	default:
		err = fmt.Errorf("demo: --workload %q: want chat or trace", workload)
	}
	return reqs, err
}
