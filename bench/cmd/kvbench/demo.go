package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/stats"
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
// slice in a loop until ctx ends.
func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kvbench demo", flag.ContinueOnError)
	var (
		tracePath = fs.String("trace", defaultTrace, "Mooncake JSONL trace")
		slice     = fs.Int("requests", 300, "requests of the trace replayed per pass")
		idTokens  = traceBlockTokens(fs)
		engines   = fs.Int("engines", 4, "simulated engines")
		capacity  = fs.Int("capacity", 4096, "cache capacity per engine, in 16-token blocks")
		speedUp   = fs.Float64("speed-up", 10, "replay speed-up over trace time")
		routerBin = fs.String("router-bin", "bin/kvrouter", "router binary")
		routerArg = fs.String("router-args", "", "extra router flags, space-separated")
		grpcAddr  = fs.String("grpc-addr", ":50051", "router gRPC listen address")
		httpAddr  = fs.String("http-addr", ":9090", "router HTTP listen address")
		every     = fs.Duration("log-every", 5*time.Second, "summary interval")
		model     = fs.String("model", "bench-model", "model name the engines serve")
		tm        timeModel
	)
	tm.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	reqs, err := loadDemoTrace(findTrace(*tracePath), *slice, *idTokens, log)
	if err != nil {
		return err
	}
	if len(reqs) == 0 {
		return errors.New("demo: empty trace slice")
	}
	fleet, err := replay.StartFleet(replay.FleetConfig{
		Engines: *engines, Replay: true,
		Engine: engine.Config{CapacityBlocks: *capacity, PrefillPerToken: tm.prefill, DecodePerToken: tm.decode},
	})
	if err != nil {
		return err
	}
	defer fleet.Close()
	router, err := replay.StartRouter(ctx, replay.RouterConfig{
		Bin: *routerBin, GRPCAddr: *grpcAddr, HTTPAddr: *httpAddr,
		Args: strings.Fields(*routerArg), Log: os.Stderr,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := router.Stop(); err != nil {
			log.Warn("stop router", "err", err)
		}
	}()
	if err := fleet.Register(ctx, router.Registry, *model, 20*time.Second); err != nil {
		return err
	}
	log.Info("demo running", "router_grpc", router.GRPCAddr, "router_http", router.HTTPAddr, "engines", *engines, "requests_per_pass", len(reqs))
	printTryCommands(router.GRPCAddr, router.HTTPAddr, *model, reqs[0])

	var (
		mu  sync.Mutex
		lat []time.Duration
	)
	inner := replay.RouterChooser(router.Router, fleet, *model)
	choose := func(ctx context.Context, seq int, tokens []uint32, id string) (replay.Choice, error) {
		c, err := inner(ctx, seq, tokens, id)
		if err == nil {
			mu.Lock()
			lat = append(lat, c.RouteLatency)
			mu.Unlock()
		}
		return c, err
	}
	// Summary logger.
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(*every)
		defer t.Stop()
		var prev engine.Stats
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if ctx.Err() != nil {
				return
			}
			tot := fleet.Totals()
			mu.Lock()
			window := lat
			lat = nil
			mu.Unlock()
			s := stats.Summarize(window)
			hit := 0.0
			if d := tot.PromptBlocks - prev.PromptBlocks; d > 0 {
				hit = float64(tot.CachedBlocks-prev.CachedBlocks) / float64(d)
			}
			applied, _ := replay.EventsApplied(ctx, router.Registry, *model)
			// Requests are routed on arrival; engines may still be working through
			// earlier ones, so a window can have served requests but no Route calls.
			p50, p99 := "-", "-"
			if len(window) > 0 {
				p50, p99 = s.P50.Round(time.Microsecond).String(), s.P99.Round(time.Microsecond).String()
			}
			log.Info("summary", "requests", tot.Requests, "window_requests", tot.Requests-prev.Requests,
				"window_hit_rate", fmt.Sprintf("%.1f%%", 100*hit),
				"window_routes", len(window), "route_p50", p50, "route_p99", p99,
				"events_published", tot.Events, "events_applied", applied, "cached_blocks", tot.CachedNow)
			prev = tot
		}
	}()

	span := reqs[len(reqs)-1].Arrival + time.Second
	clock := replay.Clock{T0: time.Now(), SpeedUp: *speedUp}
	for pass := 0; ; pass++ {
		pr, err := replay.Play(ctx, replay.PlayConfig{
			Fleet: fleet, Requests: reqs, Clock: clock, Offset: time.Duration(pass) * span,
			Choose: choose, Router: router.Router, IDPrefix: fmt.Sprintf("demo-%d-", pass),
		})
		if ctx.Err() != nil {
			log.Info("stopping")
			return nil
		}
		if err != nil {
			return err
		}
		if pr.FirstError != "" {
			log.Warn("pass had errors", "pass", pass, "choose_errors", pr.ChooseErrors, "mark_errors", pr.MarkErrors, "first", pr.FirstError)
		}
		select {
		case <-router.Exited():
			return errors.New("router exited")
		default:
		}
	}
}

func printTryCommands(grpcAddr, httpAddr, model string, r trace.Request) {
	toks := r.Tokens(nil)[:48]
	ids := make([]string, len(toks))
	for i, t := range toks {
		ids[i] = fmt.Sprint(t)
	}
	g := strings.Replace(grpcAddr, "127.0.0.1", "localhost", 1)
	fmt.Fprintf(os.Stderr, `
Try it (in another terminal):
  grpcurl -plaintext %[1]s list
  grpcurl -plaintext -d '{"model":"%[2]s"}' %[1]s kvrouter.v1.Registry/ListWorkers
  grpcurl -plaintext -d '{"prompt":{"model":"%[2]s","token_ids":[%[3]s]}}' %[1]s kvrouter.v1.Router/Score
  grpcurl -plaintext -d '{"prompt":{"model":"%[2]s","token_ids":[%[3]s]}}' %[1]s kvrouter.v1.Router/Route
  curl -s http://%[4]s/metrics | grep '^kvrouter_'
(The token ids are the first 48 tokens of the trace's shared prefix, so every engine that served
a request holds them.) Stop with Ctrl-C.

`, g, model, strings.Join(ids, ","), strings.Replace(httpAddr, "127.0.0.1", "localhost", 1))
}
