package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/sweep"
	"github.com/kvrouter/kvrouter/bench/trace"
)

// sweepShort is what --short changes, unless the flag is given explicitly:
// 2 traces (300 requests of the conversation trace, 2 minutes of chat) x
// 1 capacity x 2 loads.
var sweepShort = map[string]string{
	"limit":        "300",
	"shapes":       "chat",
	"gen-duration": "2m",
	"gen-warmup":   "1m",
	"capacities":   "4096",
	"loads":        "0.7,1.3",
}

// parseSweep reads kvbench sweep's flags and builds the matrix (loading and
// generating its traces).
// It runs past 100 lines for its flag list, one line per flag: split, the
// flags would be registered in one place and read in another.
func parseSweep(args []string, log io.Writer) (sweep.Config, string, error) {
	fs := flag.NewFlagSet("kvbench sweep", flag.ContinueOnError)
	var names []string
	for _, p := range sweep.Policies {
		names = append(names, p.Name)
	}
	var (
		short     = fs.Bool("short", false, "reduced matrix for CI: "+fmt.Sprint(sweepShort))
		tracePath = fs.String("trace", defaultTrace, "Mooncake JSONL trace (the embedded 300-request demo slice when the file is missing); empty: none")
		limit     = fs.Int("limit", 0, "use at most this many requests of --trace (0: all)")
		idTokens  = traceBlockTokens(fs)
		shapes    = fs.String("shapes", "chat,agent,rag,mix", "generated traces (kvbench gen shapes), comma-separated; empty: none")
		arrival   = fs.String("arrival", "poisson", "arrival process of the generated traces")
		genDur    = fs.Duration("gen-duration", 10*time.Minute, "duration of each generated trace (at kvbench gen's default 4 requests/s, before load scaling)")
		genWarm   = fs.Duration("gen-warmup", 5*time.Minute, "warm-up of each generated trace")
		seed      = fs.Uint64("seed", 1, "seed of the generated traces")
		caps      = fs.String("capacities", "4096,16384,65536", "cache capacities per engine, in 16-token blocks")
		loads     = fs.String("loads", "0.7,1.0,1.3", "offered loads, as fractions of round-robin's prefill capacity")
		policies  = fs.String("policies", strings.Join(names, ","), "policies, comma-separated (must include "+sweep.Baseline+")")
		engines   = fs.Int("engines", 16, "simulated engines")
		speedUp   = fs.Float64("speed-up", 30, "replay speed-up for policies that depend on timing (the router)")
		fastUp    = fs.Float64("fast-speed-up", 1000, "replay speed-up for policies whose results do not depend on it (round-robin)")
		outDir    = fs.String("out", "bench/out/sweep", "output directory (sweep.md, sweep.json, sweep.svg, logs/)")
		routerBin = fs.String("router-bin", "bin/kvrouter", "router binary")
		routerArg = fs.String("router-args", "", "extra router flags for every router policy, space-separated")
		format    = fs.String("format", "vllm-map", "event wire format: vllm-map, vllm-array or sglang")
		tm        timeModel
	)
	tm.bind(fs)
	if err := fs.Parse(args); err != nil {
		return sweep.Config{}, "", err
	}
	if fs.NArg() > 0 {
		return sweep.Config{}, "", fmt.Errorf("sweep: unexpected arguments %q", fs.Args())
	}
	if *short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for k, v := range sweepShort {
			if !set[k] {
				if err := fs.Set(k, v); err != nil {
					return sweep.Config{}, "", err
				}
			}
		}
	}
	f, err := engine.ParseFormat(*format)
	if err != nil {
		return sweep.Config{}, "", err
	}
	em, err := tm.engineModel()
	if err != nil {
		return sweep.Config{}, "", err
	}
	cfg := sweep.Config{
		Engines: *engines, SpeedUp: *speedUp, FastSpeedUp: *fastUp,
		PrefillPerToken: tm.prefill, DecodePerToken: tm.decode, Format: f,
		EngineModel: em, MaxNumBatchedTokens: tm.maxBatched, MaxNumSeqs: tm.maxNumSeq, Lockstep: tm.lockstep, Records: tm.records,
		Router: harness.RouterConfig{Bin: *routerBin, Args: strings.Fields(*routerArg)},
		OutDir: *outDir, Progress: log,
	}
	for _, s := range splitList(*caps) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return cfg, "", fmt.Errorf("sweep: capacity %q: want a positive integer", s)
		}
		cfg.Capacities = append(cfg.Capacities, n)
	}
	for _, s := range splitList(*loads) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 {
			return cfg, "", fmt.Errorf("sweep: load %q: want a positive fraction", s)
		}
		cfg.Loads = append(cfg.Loads, v)
	}
	for _, s := range splitList(*policies) {
		p, ok := sweep.PolicyByName(s)
		if !ok {
			return cfg, "", fmt.Errorf("sweep: unknown policy %q (want one of %s)", s, strings.Join(names, ", "))
		}
		cfg.Policies = append(cfg.Policies, p)
	}
	if *tracePath != "" {
		path := findTrace(*tracePath)
		var reqs []trace.Request
		src := path
		if _, err := os.Stat(path); err == nil {
			reqs, err = trace.LoadBlocks(path, *limit, *idTokens)
			if err != nil {
				return cfg, "", err
			}
		} else {
			src = "embedded demo slice (first 300 requests of the Mooncake conversation trace)"
			reqs, err = trace.Parse(bytes.NewReader(demoTrace), *limit)
			if err != nil {
				return cfg, "", err
			}
		}
		if *limit > 0 {
			src += fmt.Sprintf(", first %d requests", len(reqs))
		}
		cfg.Traces = append(cfg.Traces, sweep.Trace{Name: "conversation", Source: src, Reqs: reqs})
	}
	for _, s := range splitList(*shapes) {
		t, err := sweep.Generate(s, *arrival, *seed, *genDur, *genWarm)
		if err != nil {
			return cfg, "", err
		}
		cfg.Traces = append(cfg.Traces, t)
	}
	if len(cfg.Traces) == 0 || len(cfg.Capacities) == 0 || len(cfg.Loads) == 0 {
		return cfg, "", fmt.Errorf("sweep: empty matrix (%d traces, %d capacities, %d loads)", len(cfg.Traces), len(cfg.Capacities), len(cfg.Loads))
	}
	return cfg, *outDir, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// writeSweep writes sweep.md, sweep.json and sweep.svg to dir.
func writeSweep(rep *sweep.Report, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		return nil, err
	}
	paths := []string{filepath.Join(dir, "sweep.md"), filepath.Join(dir, "sweep.json"), filepath.Join(dir, "sweep.svg")}
	if err := os.WriteFile(paths[0], md.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if err := rep.WriteJSON(paths[1]); err != nil {
		return nil, err
	}
	return paths, os.WriteFile(paths[2], []byte(rep.SVG()), 0o644)
}

func runSweep(ctx context.Context, args []string) error {
	cfg, out, err := parseSweep(args, os.Stderr)
	if err != nil {
		return err
	}
	for _, t := range cfg.Traces {
		fmt.Fprintf(os.Stderr, "kvbench sweep: trace %s: %d requests, offered load %.2f as recorded (%s)\n",
			t.Name, len(t.Reqs), sweep.OfferedLoad(t.Reqs, cfg.Engines, cfg.PrefillPerToken), t.Source)
	}
	rep, err := sweep.Run(ctx, cfg)
	if rep != nil && len(rep.Cells) > 0 {
		fmt.Println()
		if werr := rep.WriteMarkdown(os.Stdout); werr != nil {
			return werr
		}
		paths, werr := writeSweep(rep, out)
		if werr != nil {
			return werr
		}
		fmt.Printf("\nwrote %s in %s\n", strings.Join(paths, ", "), time.Duration(rep.WallSeconds*float64(time.Second)).Truncate(time.Second))
	}
	return err
}
