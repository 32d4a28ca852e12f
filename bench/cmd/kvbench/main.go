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
//	kvbench report SWEEP_JSON   a sweep's table and targets again, from its sweep.json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
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
	case "report":
		err = runReport(args, os.Stdout)
	case "help", "-h", "--help":
		fmt.Println("usage: kvbench [compare|demo|load|ceiling|gen|restart|attack|sweep|report] [flags]; kvbench CMD -h for flags")
		return
	default:
		err = fmt.Errorf("unknown command %q (want compare, demo, load, ceiling, gen, restart, attack, sweep or report)", cmd)
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
	lockstep, records     bool
}

func (t *timeModel) bind(fs *flag.FlagSet) {
	fs.DurationVar(&t.prefill, "prefill-per-token", 300*time.Microsecond, "simulated prefill time per uncached prompt token (the old engine model's time; also what offered load is computed with)")
	fs.DurationVar(&t.decode, "decode-per-token", 10*time.Millisecond, "simulated decode time per output token (old engine model)")
	fs.StringVar(&t.model, "engine-model", "old", "simulated engine: old (one prefill at a time, decode free) or vllm (vLLM V1 scheduler and step time; docs/engine-model.md)")
	fs.IntVar(&t.maxBatched, "max-num-batched-tokens", engine.DefaultMaxNumBatchedTokens, "vllm engine model: token budget of one step")
	fs.IntVar(&t.maxNumSeq, "max-num-seqs", engine.DefaultMaxNumSeqs, "vllm engine model: most requests running at once")
	fs.BoolVar(&t.lockstep, "lockstep", false, "vllm engine model: replay in lockstep, each Route seeing the fleet and the routers as they are at its arrival however slow the machine (the speed-up only paces the replay; docs/engine-model.md)")
	fs.BoolVar(&t.records, "request-log", false, "vllm engine model: write each request's engine, first step, first token and tokens prefilled to requests-POLICY.jsonl in the output directory (a sweep's under logs/, router policies only)")
}

// engineModel is the parsed --engine-model and its limits.
func (t *timeModel) engineModel() (engine.Model, error) {
	m, err := engine.ParseModel(t.model)
	if err != nil {
		return 0, fmt.Errorf("--engine-model: %w", err)
	}
	if t.lockstep && m != engine.ModelVLLM {
		return 0, fmt.Errorf("--lockstep needs --engine-model vllm")
	}
	if t.records && m != engine.ModelVLLM {
		return 0, fmt.Errorf("--request-log needs --engine-model vllm")
	}
	if t.maxBatched <= 0 || t.maxNumSeq <= 0 {
		return 0, fmt.Errorf("--max-num-batched-tokens (%d) and --max-num-seqs (%d) must be positive", t.maxBatched, t.maxNumSeq)
	}
	return m, nil
}
