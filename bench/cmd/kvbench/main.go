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
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/harness"
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
		err = runDemo(ctx, args, os.Stdout)
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
	prefill, decode       time.Duration
	model                 string
	maxBatched, maxNumSeq int
}

func (t *timeModel) bind(fs *flag.FlagSet) {
	fs.DurationVar(&t.prefill, "prefill-per-token", 300*time.Microsecond, "simulated prefill time per uncached prompt token (the old engine model's time; also what offered load is computed with)")
	fs.DurationVar(&t.decode, "decode-per-token", 10*time.Millisecond, "simulated decode time per output token (old engine model)")
	fs.StringVar(&t.model, "engine-model", "old", "simulated engine: old (one prefill at a time, decode free) or vllm (vLLM V1 scheduler and step time; docs/engine-model.md)")
	fs.IntVar(&t.maxBatched, "max-num-batched-tokens", engine.DefaultMaxNumBatchedTokens, "vllm engine model: token budget of one step")
	fs.IntVar(&t.maxNumSeq, "max-num-seqs", engine.DefaultMaxNumSeqs, "vllm engine model: most requests running at once")
}

// engineModel is the parsed --engine-model and its limits.
func (t *timeModel) engineModel() (engine.Model, error) {
	m, err := engine.ParseModel(t.model)
	if err != nil {
		return 0, fmt.Errorf("--engine-model: %w", err)
	}
	if t.maxBatched <= 0 || t.maxNumSeq <= 0 {
		return 0, fmt.Errorf("--max-num-batched-tokens (%d) and --max-num-seqs (%d) must be positive", t.maxBatched, t.maxNumSeq)
	}
	return m, nil
}

// compareShort is what compare --short changes, unless the flag is given
// explicitly: the first 300 requests, the router policy only.
var compareShort = map[string]string{
	"limit":    "300",
	"policies": replay.PolicyKV,
}

// compareRun is a parsed kvbench compare command line.
type compareRun struct {
	cfg    replay.CompareConfig
	outDir string
	trace  string
	// cleanup removes the ungzipped tokenizer of a text run (nil: nothing to remove).
	cleanup func()
}

// parseCompare reads kvbench compare's flags and loads the trace.
// It is longer than ~80 lines for its flag list, one line per flag.
func parseCompare(args []string) (compareRun, error) {
	fs := flag.NewFlagSet("kvbench compare", flag.ContinueOnError)
	var (
		short     = fs.Bool("short", false, "a few seconds' smoke run: "+fmt.Sprint(compareShort))
		tracePath = fs.String("trace", defaultTrace, "Mooncake JSONL trace (the embedded 300-request demo slice when the file is missing)")
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
		replicas  = fs.String("replicas", "", "router replicas behind a round-robin gateway, comma-separated counts (e.g. 1,2,3), each a run of every router policy; empty: one router called directly")
		marks     = fs.String("marks", replay.MarksSpread, "where the gateway sends a request's marks: spread (a replica picked by a hash of the request id and the mark, whichever routed it) or origin (the one that routed it)")
		killAt    = fs.String("kill-replica-at", "", "SIGKILL one replica when this share of the requests has been routed (e.g. 50%), in runs with 2+ replicas; every run reports its hit rate before and after")
		victim    = fs.Int("kill-replica", 0, "which replica --kill-replica-at kills")
		rounds    = fs.Int("rounds", 1, "repeat the whole list of runs (A B A B ...)")
		toFirst   = fs.Bool("routes-to-first", false, "diagnostic: the gateway sends every Route to replica 0 (marks still as --marks), so the other replicas only ingest and sync")
		lagProbes = fs.Int("sync-lag-probes", 50, "in cluster runs of 2+ replicas (not counting a killed one), probe the Route-to-other-replica lag this many times during the replay")
		sync      = syncModes{true}
		tm        timeModel
		textTok   = fs.String("text-tokenizer", "", textTokenizerUsage)
		textForm  = fs.String("text-form", "text", "with --text-tokenizer: send Prompt.text (text) or Prompt.openai_body with a completions or chat body")
	)
	fs.Var(&sync, "sync", "with --replicas: true (cluster mode on an embedded NATS server), false (independent routers, the ablation) or both")
	tm.bind(fs)
	if err := fs.Parse(args); err != nil {
		return compareRun{}, err
	}
	if fs.NArg() > 0 {
		return compareRun{}, fmt.Errorf("compare: unexpected arguments %q", fs.Args())
	}
	if *short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for k, v := range compareShort {
			if !set[k] {
				if err := fs.Set(k, v); err != nil {
					return compareRun{}, err
				}
			}
		}
	}
	f, err := engine.ParseFormat(*format)
	if err != nil {
		return compareRun{}, err
	}
	em, err := tm.engineModel()
	if err != nil {
		return compareRun{}, err
	}
	cfg := replay.CompareConfig{
		Engines: *engines, Capacity: *capacity, SpeedUp: *speedUp,
		PrefillPerToken: tm.prefill, DecodePerToken: tm.decode, Format: f,
		EngineModel: em, MaxNumBatchedTokens: tm.maxBatched, MaxNumSeqs: tm.maxNumSeq,
		Router:   harness.RouterConfig{Bin: *routerBin, Args: strings.Fields(*routerArg)},
		Policies: splitList(*policies), Progress: os.Stderr, Seed: *seed,
		Sync: sync, Marks: *marks, KillReplica: *victim, Rounds: *rounds, RoutesToFirst: *toFirst, SyncLagProbes: *lagProbes,
	}
	for _, s := range splitList(*replicas) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return compareRun{}, fmt.Errorf("compare: replicas %q: want a positive integer", s)
		}
		cfg.Replicas = append(cfg.Replicas, n)
	}
	if *killAt != "" {
		if cfg.KillAt, err = parseFraction(*killAt); err != nil {
			return compareRun{}, fmt.Errorf("compare: kill-replica-at: %w", err)
		}
		if len(cfg.Replicas) == 0 {
			return compareRun{}, errors.New("compare: --kill-replica-at needs --replicas")
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	path := findTrace(*tracePath)
	if cfg.Requests, err = loadDemoTrace(path, *limit, *idTokens, log); err != nil {
		return compareRun{}, err
	}
	run := compareRun{cfg: cfg, outDir: *outDir, trace: path}
	if *textTok != "" {
		if run.cleanup, err = applyText(&run.cfg, *textTok, *textForm); err != nil {
			return compareRun{}, err
		}
	}
	return run, nil
}

// parseFraction reads "50%" or "0.5" as a fraction in (0, 1).
func parseFraction(s string) (float64, error) {
	scale := 1.0
	if t, ok := strings.CutSuffix(s, "%"); ok {
		s, scale = t, 0.01
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: want a share such as 50%% or 0.5", s)
	}
	v *= scale
	if v <= 0 || v >= 1 {
		return 0, fmt.Errorf("%q: want a share strictly between 0 and 100%%", s)
	}
	return v, nil
}

// syncModes is --sync: true, false or both.
type syncModes []bool

func (m *syncModes) String() string {
	if m == nil || len(*m) == 0 {
		return "true"
	}
	if len(*m) == 2 {
		return "both"
	}
	return strconv.FormatBool((*m)[0])
}

func (m *syncModes) Set(s string) error {
	if s == "both" {
		*m = syncModes{true, false}
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true, false or both")
	}
	*m = syncModes{b}
	return nil
}

func runCompare(ctx context.Context, args []string) error {
	run, err := parseCompare(args)
	if err != nil {
		return err
	}
	if run.cleanup != nil {
		defer run.cleanup()
	}
	cfg, outDir := run.cfg, run.outDir
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	cfg.OutDir = outDir
	reqs := cfg.Requests
	span := time.Duration(0)
	if len(reqs) > 0 {
		span = reqs[len(reqs)-1].Arrival
	}
	fmt.Fprintf(os.Stderr, "kvbench: %d requests over %v of trace time, about %v of wall time per run\n",
		len(reqs), span.Truncate(time.Second), time.Duration(float64(span)/cfg.SpeedUp).Truncate(time.Second))
	rep, err := replay.Compare(ctx, cfg)
	if rep != nil {
		rep.Trace = run.trace
		if len(rep.Results) > 0 {
			fmt.Println()
			rep.WriteTable(os.Stdout)
			jp, sp := filepath.Join(outDir, "kvbench.json"), filepath.Join(outDir, "kvbench.svg")
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
