package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/restart"
)

// `kvbench restart`: the flags of bench/restart's scenario.

// shortRestart is --short: four engines, about 20 s in all.
var shortRestart = map[string]string{
	"engines": "4", "capacity": "2048", "kill-min": "3s", "kill-max": "5s", "downtime": "2s",
	"after": "2s", "snapshot-interval": "1s", "exact-timeout": "15s", "samples": "50",
}

// parseRestart parses `kvbench restart`'s flags and loads the trace. It is
// longer than ~80 lines for its flag list, one line per flag.
func parseRestart(args []string, progress io.Writer) (restart.Config, error) {
	fs := flag.NewFlagSet("kvbench restart", flag.ContinueOnError)
	var (
		c         restart.Config
		tracePath string
		limit     int
		routerArg string
		format    string
		short     bool
	)
	fs.StringVar(&tracePath, "trace", defaultTrace, "Mooncake JSONL trace (the embedded 300-request demo slice when the file is missing)")
	fs.IntVar(&limit, "limit", 0, "use at most this many requests of the trace (0: all); the schedule repeats it as needed")
	idTokens := traceBlockTokens(fs)
	fs.IntVar(&c.Engines, "engines", 8, "simulated engines (one rank each)")
	fs.IntVar(&c.Capacity, "capacity", 4096, "cache capacity per engine, in 16-token blocks")
	fs.IntVar(&c.Buffer, "replay-buffer", 10000, "replay buffer of each engine, in batches")
	fs.IntVar(&c.ShortBuffer, "short-buffer", 16, "replay buffer of engine-00, in batches, meant too short to cover the downtime (0: every engine gets --replay-buffer)")
	fs.Float64Var(&c.SpeedUp, "speed-up", 30, "replay speed-up over trace time")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the kill point, the fallback choices and the Score samples")
	fs.DurationVar(&c.KillMin, "kill-min", 5*time.Second, "earliest kill -9 after the replay starts")
	fs.DurationVar(&c.KillMax, "kill-max", 15*time.Second, "latest kill -9 after the replay starts")
	fs.DurationVar(&c.Downtime, "downtime", 3*time.Second, "how long the engines publish with the router down")
	fs.DurationVar(&c.After, "after", 5*time.Second, "live replay after the catch-up check, then a final check (0: none)")
	fs.DurationVar(&c.Snapshot, "snapshot-interval", 2*time.Second, "router --snapshot-interval")
	fs.DurationVar(&c.Timeout, "exact-timeout", 30*time.Second, "how long after the restart the index may take to become exact")
	fs.IntVar(&c.Samples, "samples", 200, "cached prompts per engine whose Score is checked for every rank")
	fs.StringVar(&c.Policy, "policy", "random", "who places requests while the router is up: random (seeded, every engine gets traffic) or route (Route without request_id: by overlap alone, so a few engines take most); random while it is down")
	fs.StringVar(&c.RouterBin, "router-bin", "bin/kvrouter", "router binary")
	fs.StringVar(&routerArg, "router-args", "", "extra router flags, space-separated")
	fs.StringVar(&c.StateDir, "state-dir", "", "router --state-dir (empty: a fresh temporary directory)")
	fs.BoolVar(&c.NoState, "no-state", false, "run the router without a state directory (--state-dir none, or no flag for a router without one) to see what a restart loses")
	fs.BoolVar(&c.Reregister, "reregister", false, "register the fleet again after the restart, as an operator must without a durable registry (a baseline: the engines replay whatever their buffers hold)")
	fs.BoolVar(&c.RestartEng, "restart-engine", false, "engine-01 restarts halfway through the downtime (new process: seq from 0, empty cache, same addresses); its rank must come back \"reset\" and exact")
	fs.BoolVar(&c.Keep, "keep", false, "keep the work directory (state dir, router logs) even when the run passes")
	fs.StringVar(&c.Model, "model", "bench-model", "model name the engines serve")
	fs.StringVar(&format, "format", "vllm-map", "event wire format: vllm-map, vllm-array or sglang")
	fs.BoolVar(&short, "short", false, "CI size: 4 engines, kill at 3-5 s, 2 s down, 2 s live after, 1 s snapshots, 50 samples (flags given explicitly win)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range shortRestart {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return c, err
				}
			}
		}
	}
	c.RouterArgs = strings.Fields(routerArg)
	var err error
	if c.Format, err = engine.ParseFormat(format); err != nil {
		return c, err
	}
	switch {
	case c.Engines < 1:
		return c, fmt.Errorf("--engines %d: want at least 1", c.Engines)
	case c.Capacity < 1 || c.Buffer < 1 || c.ShortBuffer < 0 || c.Samples < 0:
		return c, errors.New("--capacity and --replay-buffer must be positive, --short-buffer and --samples not negative")
	case c.SpeedUp <= 0:
		return c, fmt.Errorf("--speed-up %v: want positive", c.SpeedUp)
	case c.KillMin <= 0 || c.KillMax < c.KillMin:
		return c, fmt.Errorf("kill window %v..%v: want 0 < kill-min <= kill-max", c.KillMin, c.KillMax)
	case c.Downtime < 0 || c.After < 0 || c.Snapshot <= 0 || c.Timeout <= 0:
		return c, errors.New("--downtime and --after must not be negative, --snapshot-interval and --exact-timeout positive")
	case c.RestartEng && c.Engines < 2:
		return c, errors.New("--restart-engine restarts engine-01: want at least 2 engines")
	case c.Policy != restart.PolicyRoute && c.Policy != restart.PolicyRandom:
		return c, fmt.Errorf("--policy %q: want route or random", c.Policy)
	}
	path := findTrace(tracePath)
	if c.Requests, err = loadDemoTrace(path, limit, *idTokens, slog.New(slog.NewTextHandler(progress, nil))); err != nil {
		return c, err
	}
	if len(c.Requests) == 0 {
		return c, errors.New("restart: empty trace")
	}
	c.TraceName = path
	if _, err := os.Stat(path); err != nil {
		c.TraceName = "embedded demo slice"
	}
	return c, nil
}

func runRestart(ctx context.Context, args []string) error {
	cfg, err := parseRestart(args, os.Stderr)
	if err != nil {
		return err
	}
	cfg.Out, cfg.Progress = os.Stdout, os.Stderr
	res, err := restart.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if len(res.Failures) > 0 {
		return fmt.Errorf("restart: %d check(s) failed", len(res.Failures))
	}
	return nil
}
