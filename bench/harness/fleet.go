package harness

import (
	"context"
	"fmt"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
)

// FleetConfig describes a set of simulated engines.
type FleetConfig struct {
	// Engines is the number of engines.
	Engines int
	// Engine is the template; ID, HashSeed and endpoints are set per engine.
	Engine engine.Config
	// Replay gives every engine a ROUTER replay socket.
	Replay bool
	// Prefix names engines Prefix-00, Prefix-01, ... (default "engine").
	Prefix string
	// Configure, if set, adjusts engine i's config after the template is
	// applied (e.g. one engine's replay buffer).
	Configure func(i int, c *engine.Config)
}

// Fleet is a set of running simulated engines.
type Fleet struct {
	Engines []*engine.Engine
	// Endpoints, if set, are the engines' HTTP fronts (host:port, engine
	// i's at i), which Register registers them under instead of sim://<id>.
	Endpoints []string
	byID      map[string]int
}

// StartFleet starts the engines on free loopback ports.
func StartFleet(cfg FleetConfig) (*Fleet, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "engine"
	}
	f := &Fleet{byID: make(map[string]int, cfg.Engines)}
	for i := 0; i < cfg.Engines; i++ {
		ec := cfg.Engine
		ec.ID = fmt.Sprintf("%s-%02d", cfg.Prefix, i)
		ec.HashSeed = uint64(i)*0x9E3779B97F4A7C15 + 1
		ec.Endpoint = "tcp://127.0.0.1:0"
		if cfg.Replay {
			ec.ReplayEndpoint = "tcp://127.0.0.1:0"
		}
		if cfg.Configure != nil {
			cfg.Configure(i, &ec)
		}
		e, err := engine.New(ec)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.byID[ec.ID] = i
		f.Engines = append(f.Engines, e)
	}
	return f, nil
}

// Index returns the position of the engine named id.
func (f *Fleet) Index(id string) (int, bool) {
	i, ok := f.byID[id]
	return i, ok
}

// Close stops every engine.
func (f *Fleet) Close() {
	for _, e := range f.Engines {
		e.Close()
	}
}

// Register registers every engine with the router as a worker of model, then
// waits (up to timeout) until each engine's publisher has a subscriber, so no
// event published afterwards is lost to a slow join.
func (f *Fleet) Register(ctx context.Context, reg kvrouterv1.RegistryClient, model string, timeout time.Duration) error {
	for i, e := range f.Engines {
		ep := "sim://" + e.ID()
		if i < len(f.Endpoints) {
			ep = "http://" + f.Endpoints[i]
		}
		w := &kvrouterv1.Worker{
			WorkerId:         e.ID(),
			Model:            model,
			Endpoint:         ep,
			KvEventsEndpoint: e.Endpoint(), // where the engine bound: the router dials it
			ReplayEndpoint:   e.ReplayEndpoint(),
			DpSize:           1,
			BlockSize:        16,
		}
		if _, err := reg.RegisterWorker(ctx, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
			return fmt.Errorf("register %s: %w", e.ID(), err)
		}
	}
	deadline := time.Now().Add(timeout)
	for _, e := range f.Engines {
		for !e.Publisher().Subscribed() {
			if time.Now().After(deadline) {
				return fmt.Errorf("engine %s: router did not subscribe to %s within %v", e.ID(), e.Endpoint(), timeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

// Totals sums the engines' stats.
func (f *Fleet) Totals() engine.Stats {
	var t engine.Stats
	for _, e := range f.Engines {
		s := e.Stats()
		t.Requests += s.Requests
		t.PromptBlocks += s.PromptBlocks
		t.CachedBlocks += s.CachedBlocks
		t.PromptTokens += s.PromptTokens
		t.StoredBlocks += s.StoredBlocks
		t.EvictedBlocks += s.EvictedBlocks
		t.Batches += s.Batches
		t.Events += s.Events
		t.CachedNow += s.CachedNow
		t.ReplayRequests += s.ReplayRequests
		t.ReplayMalformed += s.ReplayMalformed
		t.Preemptions += s.Preemptions
	}
	return t
}

// EventsApplied sums events_applied over the router's workers.
func EventsApplied(ctx context.Context, reg kvrouterv1.RegistryClient, model string) (uint64, error) {
	resp, err := reg.ListWorkers(ctx, &kvrouterv1.ListWorkersRequest{Model: model})
	if err != nil {
		return 0, fmt.Errorf("list workers: %w", err)
	}
	var n uint64
	for _, w := range resp.Workers {
		n += w.EventsApplied
	}
	return n, nil
}

// Applied reports whether the router behind reg has applied every event
// batch the engines have published so far (each worker's last_seq).
func (f *Fleet) Applied(ctx context.Context, reg kvrouterv1.RegistryClient, model string) (bool, error) {
	last := make(map[string]*kvrouterv1.WorkerStatus, len(f.Engines))
	req := &kvrouterv1.ListWorkersRequest{Model: model}
	for {
		resp, err := reg.ListWorkers(ctx, req)
		if err != nil {
			return false, fmt.Errorf("list workers: %w", err)
		}
		for _, w := range resp.Workers {
			if w.DpRank == 0 {
				last[w.GetWorker().GetWorkerId()] = w
			}
		}
		if resp.NextPageToken == "" {
			break
		}
		req.PageToken = resp.NextPageToken
	}
	for _, e := range f.Engines {
		next := e.Publisher().Seq()
		if next == 0 {
			continue
		}
		w, ok := last[e.ID()]
		// Batch 0 applied leaves last_seq at 0, as nothing applied does:
		// events_applied tells them apart.
		if !ok || w.LastSeq < next-1 || (next == 1 && w.EventsApplied == 0) {
			return false, nil
		}
	}
	return true, nil
}
