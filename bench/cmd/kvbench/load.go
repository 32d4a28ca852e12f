package main

import (
	"context"
	"flag"
	"os"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/load"
)

// `kvbench load`: the flags of bench/load's Route load generator.

func parseLoad(args []string) (load.Config, func(), error) {
	fs := flag.NewFlagSet("kvbench load", flag.ContinueOnError)
	c := load.Config{Out: os.Stdout, Progress: os.Stderr}
	var routerArg, format, routerLog string
	fs.StringVar(&c.RouterAddr, "router-addr", "", "existing router gRPC address (empty: start --router-bin on free ports)")
	fs.StringVar(&c.RouterBin, "router-bin", "bin/kvrouter", "router binary")
	fs.StringVar(&routerArg, "router-args", "", "extra router flags, space-separated")
	fs.IntVar(&c.Engines, "engines", 125, "simulated engines (workers)")
	fs.IntVar(&c.DP, "dp", 8, "data-parallel ranks per engine (each a PUB socket)")
	fs.IntVar(&c.Fill, "fill", 16384, "blocks each rank holds")
	fs.IntVar(&c.Docs, "docs", 4000, "distinct 8,192-token documents in the pool")
	fs.IntVar(&c.Groups, "groups", 64, "document groups sharing a 64-block prefix")
	fs.IntVar(&c.PromptTokens, "prompt-tokens", 8192, "tokens per Route prompt (multiple of 16)")
	fs.Float64Var(&c.Rate, "rate", 10000, "target Route requests per second")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "measured duration")
	fs.DurationVar(&c.Warmup, "warmup", 2*time.Second, "unmeasured warm-up at the target rate")
	fs.IntVar(&c.Clients, "clients", 64, "concurrent client goroutines")
	fs.IntVar(&c.Conns, "conns", 4, "gRPC connections")
	fs.UintVar(&c.MaxCand, "max-candidates", 1, "RouteRequest.max_candidates (0: all)")
	fs.Float64Var(&c.Churn, "churn", 100, "documents per second re-served by random ranks during the run (store+evict events)")
	fs.StringVar(&c.Model, "model", "load-model", "model name")
	fs.DurationVar(&c.FillTimeout, "fill-timeout", 5*time.Minute, "how long to wait for the router to index the fill")
	fs.StringVar(&format, "format", "vllm-map", "event wire format")
	fs.StringVar(&routerLog, "router-log", "", "file for the started router's log (empty: discard)")
	fs.BoolVar(&c.Stream, "stream", false, "send Routes on RouteStream (one stream per client) instead of unary Route calls")
	fs.StringVar(&c.Form, "prompt-form", load.FormTokens, "what a Route sends: tokens (token_ids) or hashes (block_hashes the client computed)")
	fs.DurationVar(&c.Idle, "idle", 5*time.Second, "before the load, how long to measure the started router's CPU with no Routes (the fill done, the churn's events going on): Route's CPU is also given net of it (0: not measured)")
	fs.BoolVar(&c.Null, "null", false, "the transport baseline: send the same requests for a model no worker serves, which the router decodes and refuses (NotFound) before any routing work")
	if err := fs.Parse(args); err != nil {
		return c, nil, err
	}
	c.RouterArgs = strings.Fields(routerArg)
	var err error
	if c.Format, err = engine.ParseFormat(format); err != nil {
		return c, nil, err
	}
	cleanup := func() {}
	if routerLog != "" && c.RouterAddr == "" {
		lf, err := os.Create(routerLog)
		if err != nil {
			return c, nil, err
		}
		c.RouterLog, cleanup = lf, func() { lf.Close() }
	}
	return c, cleanup, nil
}

func runLoad(ctx context.Context, args []string) error {
	cfg, cleanup, err := parseLoad(args)
	if err != nil {
		return err
	}
	defer cleanup()
	return load.Run(ctx, cfg)
}
