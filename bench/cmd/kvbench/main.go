// Command kvbench measures what kvrouter does for a fleet of simulated
// engines, and runs the `make run` demo and the Route load generator.
//
//	kvbench [compare] [flags]   replay a trace under several routing policies and compare
//	kvbench demo [flags]        the router plus four simulated engines, until interrupted
//	kvbench load [flags]        Route latency at a target rate against a filled index
//	kvbench ceiling [flags]     pooled-LRU ceilings for a range of capacities (no router)
//	kvbench gen [flags]         write a synthetic Mooncake-format trace (chat, agent, rag, mix)
//	kvbench restart [flags]     kill -9 the router mid-replay, restart it on its state dir, check the index
//	kvbench attack [flags]      hostile input at the router's gRPC and ZMQ edges, measured against honest traffic
//	kvbench sweep [flags]       compare over traces x capacities x offered loads; one table, JSON and chart
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/trace"
)

const defaultTrace = "../shared/traces/conversation_trace.jsonl"

func main() {
	args := os.Args[1:]
	cmd := "compare"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd {
	case "compare":
		err = runCompare(ctx, args)
	case "demo":
		err = runDemo(ctx, args)
	case "load":
		err = runLoad(ctx, args)
	case "ceiling":
		err = runCeiling(args)
	case "gen":
		err = runGen(args)
	case "restart":
		err = runRestart(ctx, args)
	case "attack":
		err = runAttack(ctx, args)
	case "sweep":
		err = runSweep(ctx, args)
	case "help", "-h", "--help":
		fmt.Println("usage: kvbench [compare|demo|load|ceiling|gen|restart|attack|sweep] [flags]; kvbench CMD -h for flags")
		return
	default:
		err = fmt.Errorf("unknown command %q (want compare, demo, load, ceiling, gen, restart, attack or sweep)", cmd)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvbench:", err)
		os.Exit(1)
	}
}

// findTrace returns path if it exists, else the trace relative to the repo's
// parent (so `make bench` works from the repository root).
func findTrace(path string) string {
	if _, err := os.Stat(path); err == nil {
		return path
	}
	for _, alt := range []string{defaultTrace, "/work/shared/traces/conversation_trace.jsonl"} {
		if _, err := os.Stat(alt); err == nil {
			return alt
		}
	}
	return path
}

// traceBlockTokens binds --trace-block-tokens, the tokens one hash id of the
// trace stands for (512 in Mooncake's traces; `kvbench gen --block-tokens`
// writes others).
func traceBlockTokens(fs *flag.FlagSet) *int {
	return fs.Int("trace-block-tokens", trace.IDTokens, "prompt tokens one hash id of the trace stands for")
}

type timeModel struct {
	prefill, decode time.Duration
}

func (t *timeModel) bind(fs *flag.FlagSet) {
	fs.DurationVar(&t.prefill, "prefill-per-token", 300*time.Microsecond, "simulated prefill time per uncached prompt token")
	fs.DurationVar(&t.decode, "decode-per-token", 10*time.Millisecond, "simulated decode time per output token")
}

func runCompare(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kvbench compare", flag.ContinueOnError)
	var (
		tracePath = fs.String("trace", defaultTrace, "Mooncake JSONL trace")
		limit     = fs.Int("limit", 0, "replay at most this many requests (0: all)")
		idTokens  = traceBlockTokens(fs)
		engines   = fs.Int("engines", 16, "simulated engines")
		capacity  = fs.Int("capacity", 4096, "cache capacity per engine, in 16-token blocks")
		speedUp   = fs.Float64("speed-up", 30, "replay speed-up over trace time")
		outDir    = fs.String("out", "bench/out", "output directory (JSON, SVG, router logs)")
		routerBin = fs.String("router-bin", "bin/kvrouter", "router binary")
		routerArg = fs.String("router-args", "", "extra router flags, space-separated (e.g. \"--prefill-weight=1\")")
		policies  = fs.String("policies", strings.Join(replay.AllPolicies, ","), "policies to run, comma-separated")
		format    = fs.String("format", "vllm-map", "event wire format: vllm-map, vllm-array or sglang")
		seed      = fs.Uint64("seed", 1, "seed of the random policy")
		tm        timeModel
	)
	tm.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := engine.ParseFormat(*format)
	if err != nil {
		return err
	}
	path := findTrace(*tracePath)
	reqs, err := trace.LoadBlocks(path, *limit, *idTokens)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	cfg := replay.CompareConfig{
		Requests: reqs, Engines: *engines, Capacity: *capacity, SpeedUp: *speedUp,
		PrefillPerToken: tm.prefill, DecodePerToken: tm.decode, Format: f,
		Router:   replay.RouterConfig{Bin: *routerBin, Args: strings.Fields(*routerArg)},
		Policies: strings.Split(*policies, ","), OutDir: *outDir, Progress: os.Stderr, Seed: *seed,
	}
	span := time.Duration(0)
	if len(reqs) > 0 {
		span = reqs[len(reqs)-1].Arrival
	}
	fmt.Fprintf(os.Stderr, "kvbench: %d requests over %v of trace time, about %v of wall time per policy\n",
		len(reqs), span.Truncate(time.Second), time.Duration(float64(span)/(*speedUp)).Truncate(time.Second))
	rep, err := replay.Compare(ctx, cfg)
	if rep != nil {
		rep.Trace = path
		if len(rep.Results) > 0 {
			fmt.Println()
			rep.WriteTable(os.Stdout)
			jp, sp := filepath.Join(*outDir, "kvbench.json"), filepath.Join(*outDir, "kvbench.svg")
			if werr := rep.WriteJSON(jp); werr != nil {
				return werr
			}
			if werr := os.WriteFile(sp, []byte(rep.SVG()), 0o644); werr != nil {
				return werr
			}
			fmt.Printf("\nwrote %s and %s\n", jp, sp)
		}
	}
	return err
}

func runCeiling(args []string) error {
	fs := flag.NewFlagSet("kvbench ceiling", flag.ContinueOnError)
	var (
		tracePath = fs.String("trace", defaultTrace, "Mooncake JSONL trace")
		limit     = fs.Int("limit", 0, "use at most this many requests (0: all)")
		idTokens  = traceBlockTokens(fs)
		engines   = fs.Int("engines", 16, "engines whose capacity is pooled")
		caps      = fs.String("capacities", "2048,4096,8192,16384,32768", "capacities per engine, in 16-token blocks")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	reqs, err := trace.LoadBlocks(findTrace(*tracePath), *limit, *idTokens)
	if err != nil {
		return err
	}
	fmt.Printf("unlimited cache (%d-token ids): %.1f%%\n", *idTokens, 100*trace.IDHitRate(reqs))
	for _, c := range strings.Split(*caps, ",") {
		var n int
		if _, err := fmt.Sscan(c, &n); err != nil || n <= 0 {
			return fmt.Errorf("capacity %q: want a positive integer", c)
		}
		fmt.Printf("%d engines x %d blocks: pooled ceiling %.1f%%\n", *engines, n, 100*trace.PooledCeiling(reqs, 16, n**engines).HitRate())
	}
	return nil
}
