package app

import (
	"context"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/cluster"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/state"
)

// startBackend restores the index (or starts an empty one), starts ingest
// with each restored rank's stream position, starts the server and
// registers the fleet. In cluster mode an index with no local snapshot
// starts from the snapshot store's newest, the registry is the bucket's,
// and the other replicas' load is collected before startBackend returns.
func (a *App) startBackend(ctx context.Context) (*persist.Keeper, error) {
	kcfg := persist.KeeperConfig{Local: a.store, CPU: a.cfg.Persist.SnapshotCPU, Logger: a.log}
	if a.cluster != nil {
		kcfg.Remote, kcfg.Timeout = cluster.SnapshotStore{Node: a.cluster.node}, a.cluster.timeout
	}
	keeper, err := persist.NewKeeper(kcfg)
	if err != nil {
		return nil, err
	}
	icfg := a.cfg.Index.Config()
	res, err := keeper.Restore(icfg)
	if err != nil {
		return nil, err
	}
	a.index = res.Index
	if a.index == nil {
		a.index = radix.New(icfg)
	}
	ingCfg := ingest.Config{Index: a.index, BlockSize: a.cfg.Scoring.BlockSize, Logger: a.log.With("component", "ingest"),
		Registerer: a.reg, Resume: resumeFrom(res.Positions)}
	a.cfg.Ingest.Apply(&ingCfg)
	if a.ingest, err = ingest.New(ingCfg); err != nil {
		return nil, err
	}
	ing := a.ingest
	a.AddCloser(func() {
		if err := ing.Close(); err != nil {
			a.log.Warn("closing subscriptions", "err", err)
		}
	})
	shareLoad := a.cluster != nil && a.cfg.Cluster.NATS.ShareLoad
	scfg := a.cfg.Scoring.Config(a.index)
	if shareLoad {
		scfg.OnChange = a.cluster.node.Publish
		scfg.Place = a.cluster.node.Place
	}
	decideLeader := shareLoad && a.cfg.Cluster.NATS.Decide == cluster.DecideLeader
	if decideLeader {
		scfg.Forward = a.cluster.node.Forward
	}
	if a.router, err = scoring.New(scfg); err != nil {
		return nil, err
	}
	if err := a.srv.Start(a.router, a.ingest, a.index); err != nil {
		return nil, err
	}
	if err := a.registerFleet(ctx, a.srv.Fleet()); err != nil {
		return nil, err
	}
	a.dropUnregistered()
	if shareLoad {
		peers, err := a.cluster.node.StartLoad(a.router)
		if err != nil {
			return nil, err
		}
		a.log.Info("load state collected from the other replicas", "replicas", peers, "active_requests", a.router.ActiveRequests())
	}
	if decideLeader {
		if err := a.cluster.node.ServeDecisions(a.router.RouteForwarded); err != nil {
			return nil, err
		}
		a.log.Info("one replica decides for the cluster (nats.decide leader)", "decider", a.cluster.node.Decider())
	}
	return keeper, nil
}

// resumeFrom hands ingest the restored ranks' stream positions.
func resumeFrom(pos map[kv.WorkerRank]ingest.Position) func(kv.WorkerRank) (ingest.Position, bool) {
	if len(pos) == 0 {
		return nil
	}
	return func(w kv.WorkerRank) (ingest.Position, bool) {
		p, ok := pos[w]
		return p, ok
	}
}

// registerFleet registers the workers at start: in cluster mode the
// bucket's, which the replica then follows; else those the state
// directory's registry kept. Then the config file's: the file is the
// operator's declaration of its own workers, so for a worker id it names
// the file wins (source config ranks highest), and a worker kept from an
// earlier file that the file no longer names is dropped; a worker
// registered through the API stays until UnregisterWorker. A kept worker
// that no longer registers (say, validation got stricter) is logged and
// left out, not fatal; a file worker that does not register is an error.
func (a *App) registerFleet(ctx context.Context, f *fleet.Fleet) error {
	if a.cluster != nil {
		if err := a.cluster.node.FollowRegistry(f, a.cluster.timeout, a.cluster.log); err != nil {
			return err
		}
	} else if a.store != nil {
		if err := a.registerStored(f); err != nil {
			return err
		}
	}
	for i, w := range a.cfg.Workers {
		if err := f.Upsert(ctx, w.Proto(), string(fleet.SourceConfig)); err != nil {
			return fmt.Errorf("config: workers[%d]: %w", i, err)
		}
	}
	return nil
}

// registerStored registers the workers the state directory's registry
// kept, but those of the config file (which registers them itself) and
// those an earlier config file declared (dropped).
func (a *App) registerStored(f *fleet.Fleet) error {
	named := make(map[string]bool, len(a.cfg.Workers))
	for _, w := range a.cfg.Workers {
		named[w.WorkerID] = true
	}
	reg := a.store.Registry()
	for _, w := range reg.Workers() {
		switch {
		case named[w.WorkerID]:
			continue
		case w.Source == state.SourceConfig:
			if _, err := reg.Delete(w.WorkerID); err != nil {
				return fmt.Errorf("registry: drop %q (no longer in the config file): %w", w.WorkerID, err)
			}
			a.log.Info("worker dropped: it came from the config file, which no longer names it", "worker", w.WorkerID)
			continue
		}
		if err := f.Register(protoWorker(w), fleet.Source(w.Source), false); err != nil {
			a.log.Error("stored worker not registered", "worker", w.WorkerID, "err", err)
		}
	}
	return nil
}

// dropUnregistered removes from a restored index the workers that were not
// registered again (unregistered, or dropped from the config file, since
// the snapshot): nothing follows their events, so their blocks would only
// go stale.
func (a *App) dropUnregistered() {
	f := a.srv.Fleet()
	seen := map[string]bool{}
	for _, w := range a.index.Workers() {
		if seen[w.ID] {
			continue
		}
		seen[w.ID] = true
		if _, _, ok := f.Registered(w.ID); ok {
			continue
		}
		a.index.RemoveWorker(w.ID)
		a.log.Info("restored blocks dropped: the worker is no longer registered", "worker", w.ID)
	}
}

// catchUpPoll is how often readiness looks at the ranks still catching up.
const catchUpPoll = 5 * time.Millisecond

// waitCaughtUp holds readiness until every followed rank's first catch-up
// from its engine is over (ingest.Manager.NotCaughtUp), at most
// CatchUpWait: an index restored from a snapshot (the state dir's or the
// cluster's) is exact only once the batches the engines buffered since
// are applied. A rank still catching up at the deadline (its engine down,
// say) is logged, and the router serves without it being exact; it
// catches up when its engine answers.
func (a *App) waitCaughtUp(ctx context.Context) {
	wait := a.cfg.CatchUpWait
	if wait <= 0 {
		return
	}
	start := time.Now()
	tick := time.NewTicker(catchUpPoll)
	defer tick.Stop()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		pending := a.ingest.NotCaughtUp()
		if len(pending) == 0 {
			a.log.Info("every rank caught up with its engine", "took", time.Since(start))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			a.log.Warn("serving before every rank caught up with its engine (--catch-up-wait)", "ranks_behind", len(pending),
				"first", pending[0].ID, "dp_rank", pending[0].DPRank, "waited", wait)
			return
		case <-tick.C:
		}
	}
}
