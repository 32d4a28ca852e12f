package main

// `kvbench compare` and `kvbench ceiling`: the flags of bench/replay's
// comparison and the pooled-LRU ceilings of bench/trace.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/trace"
)

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
		marks     = fs.String("marks", harness.MarksSpread, "where the gateway sends a request's marks: spread (a replica picked by a hash of the request id and the mark, whichever routed it) or origin (the one that routed it)")
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
		EngineModel: em, MaxNumBatchedTokens: tm.maxBatched, MaxNumSeqs: tm.maxNumSeq, Lockstep: tm.lockstep, Records: tm.records,
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
