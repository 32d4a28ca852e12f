package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
)

// backend is what serves once the state is restored: the index, the event
// subscriptions and the state directory they are snapshotted to.
type backend struct {
	index *radix.Index
	ing   *ingest.Manager
	st    *persist.Store // nil: persistence off
	cm    *clusterMode   // nil: a single router
	cpu   float64        // snapshot_cpu
}

// startBackend restores the index (or starts an empty one), starts ingest
// with each restored rank's stream position, starts the server and
// registers the fleet.
//
// In cluster mode (cm set) an index with no local snapshot starts from the
// snapshot store's newest, the registry is the bucket's, and the other
// replicas' load is collected before startBackend returns.
func startBackend(cfg Config, st *persist.Store, cm *clusterMode, srv *server.Server, reg prometheus.Registerer, log *slog.Logger) (*backend, error) {
	icfg := radix.Config{Shards: cfg.IndexShards, SegmentBlocks: cfg.IndexSegmentBlocks}
	b := &backend{st: st, cm: cm, cpu: cfg.SnapshotCPU}
	var resume map[kv.WorkerRank]ingest.Position
	restored := false
	if st != nil {
		res, err := st.Restore(icfg)
		if err != nil {
			return nil, err
		}
		b.index, resume, restored = res.Index, res.Positions, res.Snapshot.Path != ""
	}
	if cm != nil && !restored {
		if res, ok := cm.restoreFromStore(icfg, log); ok {
			b.index, resume = res.Index, res.Positions
		}
	}
	if b.index == nil {
		b.index = radix.New(icfg)
	}
	ing, err := ingest.New(ingest.Config{
		Index:      b.index,
		BlockSize:  cfg.BlockSize,
		Logger:     log.With("component", "ingest"),
		Registerer: reg,
		QueueDepth: cfg.IngestQueue,
		Resume:     resumeFrom(resume),

		MaxMessageBytes:  cfg.MaxMessageBytes,
		MaxBatchEvents:   cfg.MaxBatchEvents,
		QueueBytes:       cfg.IngestQueueBytes,
		HandshakeTimeout: cfg.HandshakeTimeout,
		FrameTimeout:     cfg.FrameTimeout,
		MaxHandshakes:    cfg.MaxHandshakes,
		CatchUpInterval:  cfg.CatchUpInterval,
	})
	if err != nil {
		return nil, err
	}
	b.ing = ing
	scfg := cfg.scoringConfig(b.index)
	if cm != nil && cfg.NATS.ShareLoad {
		scfg.OnChange = cm.node.Publish
	}
	rt, err := scoring.New(scfg)
	if err == nil {
		err = srv.Start(rt, ing, b.index)
	}
	var registered map[string]bool
	switch {
	case err != nil:
	case cm != nil:
		if err = cm.followRegistry(srv); err == nil {
			err = cm.registerFile(srv, cfg.Workers)
		}
		registered = registeredIDs(srv, b.index)
	default:
		registered, err = registerWorkers(srv, cfg.Workers, st, log)
	}
	if err != nil {
		b.close(log)
		return nil, err
	}
	dropUnregistered(b.index, registered, log)
	if cm != nil && cfg.NATS.ShareLoad {
		peers, err := cm.node.StartLoad(rt)
		if err != nil {
			b.close(log)
			return nil, err
		}
		log.Info("load state collected from the other replicas", "replicas", peers, "active_requests", rt.ActiveRequests())
	}
	return b, nil
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

// dropUnregistered removes from a restored index the workers that were not
// registered again (unregistered, or dropped from the config file, since
// the snapshot): nothing follows their events, so their blocks would only
// go stale.
func dropUnregistered(ix *radix.Index, registered map[string]bool, log *slog.Logger) {
	seen := map[string]bool{}
	for _, w := range ix.Workers() {
		if registered[w.ID] || seen[w.ID] {
			continue
		}
		seen[w.ID] = true
		ix.RemoveWorker(w.ID)
		log.Info("restored blocks dropped: the worker is no longer registered", "worker", w.ID)
	}
}

// snapshotEvery snapshots the index every interval until ctx is done or the
// returned stop is called; stop returns once no snapshot is being written.
func (b *backend) snapshotEvery(ctx context.Context, interval time.Duration, log *slog.Logger) (stop func()) {
	if b.st == nil && b.cm == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if b.cm == nil {
		wg.Go(func() { b.st.Run(ctx, interval, b.index, b.ing) })
	} else {
		wg.Go(func() { b.uploadEvery(ctx, interval, log) })
	}
	return func() { cancel(); wg.Wait() }
}

// uploadEvery snapshots the index to the state dir (if any) and the
// snapshot store every interval until ctx is done.
func (b *backend) uploadEvery(ctx context.Context, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := b.uploadSnapshot(b.cm, b.cpu, false); err != nil {
				log.Error("snapshot to the snapshot store failed; the previous one stays", "err", err)
			}
		}
	}
}

// finalSnapshot writes the shutdown snapshot, while the subscriptions still
// run (a rank is cut between two of its batches).
func (b *backend) finalSnapshot(log *slog.Logger) {
	if b.cm != nil {
		if err := b.uploadSnapshot(b.cm, 1, true); err != nil {
			log.Error("shutdown snapshot to the snapshot store failed", "err", err)
		} else {
			log.Info("shutdown snapshot uploaded")
		}
		return
	}
	if b.st == nil {
		return
	}
	info, err := b.st.SnapshotNow(b.index, b.ing)
	if err != nil {
		log.Error("shutdown snapshot failed; the previous one stays", "err", err)
		return
	}
	log.Info("shutdown snapshot written", "file", info.Path, "residencies", info.Counts.Bindings)
}

func (b *backend) close(log *slog.Logger) {
	if err := b.ing.Close(); err != nil {
		log.Warn("closing subscriptions", "err", err)
	}
}

// waitCaughtUp holds readiness until every followed rank's first catch-up
// from its engine is over (ingest.Manager.NotCaughtUp), at most wait: an
// index restored from a snapshot (the state dir's or the cluster's) is
// exact only once the batches the engines buffered since are applied. A
// rank still catching up at the deadline (its engine down, say) is logged,
// and the router serves without it being exact; it catches up when its
// engine answers.
func (b *backend) waitCaughtUp(ctx context.Context, wait time.Duration, log *slog.Logger) {
	if wait <= 0 {
		return
	}
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		pending := b.ing.NotCaughtUp()
		if len(pending) == 0 {
			log.Info("every rank caught up with its engine", "took", time.Since(start))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			log.Warn("serving before every rank caught up with its engine (--catch-up-wait)", "ranks_behind", len(pending),
				"first", pending[0].ID, "dp_rank", pending[0].DPRank, "waited", wait)
			return
		case <-tick.C:
		}
	}
}
