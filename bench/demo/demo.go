// Package demo is `make run`: the router (or replicas sharing an embedded
// NATS server, behind a round-robin gateway) and a fleet of simulated
// engines replaying a workload in a loop until interrupted, beside an
// identical fleet placed round-robin, with a line comparing the two every
// few seconds.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/sweep"
	"github.com/kvrouter/kvrouter/bench/trace"
)

// Config is one demo.
type Config struct {
	// Requests is the workload, replayed in a loop.
	Requests []trace.Request
	// Fleet configures each of the two fleets.
	Fleet harness.FleetConfig
	// Router is the router (replica 0's, with Replicas > 1: replica i
	// listens on its ports + i).
	Router   harness.RouterConfig
	Replicas int
	NATSPort int // the embedded NATS server's port with Replicas > 1 (0: any)
	Model    string
	SpeedUp  float64
	Every    time.Duration // how often the comparison line is printed
	Compare  bool          // run the round-robin fleet beside
	// Out receives the comparison lines, Try the commands to try the
	// router with, Log the progress.
	Out, Try io.Writer
	Log      *slog.Logger
}

// Run runs the demo until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	reqs, out, log := cfg.Requests, cfg.Out, cfg.Log
	if len(reqs) == 0 {
		return errors.New("demo: empty trace slice")
	}
	fleet, err := harness.StartFleet(cfg.Fleet)
	if err != nil {
		return err
	}
	defer fleet.Close()
	var be *backend
	if cfg.Replicas > 1 {
		be, err = startReplicas(ctx, cfg.Router, cfg.Replicas, cfg.NATSPort, fleet, cfg.Model, log)
	} else {
		be, err = startRouter(ctx, cfg.Router, fleet, cfg.Model, log)
	}
	if err != nil {
		return err
	}
	defer be.close()
	log.Info("demo running", "routers", len(be.grpc), "engines", cfg.Fleet.Engines, "requests_per_pass", len(reqs))
	printTryCommands(cfg.Try, be, cfg.Model, reqs[0])

	kv := &side{name: "kvrouter", fleet: fleet}
	clock := replay.Clock{T0: time.Now(), SpeedUp: cfg.SpeedUp}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	var rr *side
	if cfg.Compare {
		var closeRR func()
		if rr, closeRR, err = startRoundRobin(ctx, &wg, cfg.Fleet, reqs, clock, cfg.Fleet.Engines, log); err != nil {
			return err
		}
		defer closeRR()
	}
	fmt.Fprint(out, comparisonHeader(cfg.Every))
	wg.Add(1)
	go func() {
		defer wg.Done()
		printComparisons(ctx, out, cfg.Every, kv, rr, be, log)
	}()
	err = playLoop(ctx, kv, reqs, clock, be.choose, be.marks, be.exited, log)
	if ctx.Err() != nil {
		log.Info("stopping")
	}
	cancel()
	return err
}

// Chat is a generated multi-turn chat trace (five minutes after a
// two-minute warm-up, the generator's defaults otherwise) whose arrivals are
// stretched so that its prefill work is load of what engines can do.
func Chat(engines int, prefillPerToken time.Duration, load float64) ([]trace.Request, error) {
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
