package app

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvrouter/kvrouter/internal/cluster"
)

// Cluster mode: with a NATS URL the router is one replica of several. The
// registry is the NATS bucket (the state dir's registry file is neither
// read nor written; the state dir keeps its lock and local snapshots), each
// replica follows every registered worker's engines itself, Route load and
// marks are shared, and a replica without a local snapshot starts from the
// newest one in the object store.

// ClusterHealthService is the grpc.health.v1 service name whose status is
// the NATS connection's: SERVING while connected, NOT_SERVING while the
// replica routes on its local state alone. The overall status does not
// follow it: a replica without NATS still routes.
const ClusterHealthService = "kvrouter.cluster"

// clusterMode is a replica's cluster side.
type clusterMode struct {
	node    *cluster.Node
	log     *slog.Logger
	timeout time.Duration
	health  atomic.Pointer[health.Server]
}

// connectCluster connects to NATS when the config turns cluster mode on.
// An unreachable server is an error within nats.connect_timeout.
func (a *App) connectCluster() error {
	o := a.cfg.Cluster
	if !o.Enabled() {
		return nil
	}
	cm := &clusterMode{log: a.log.With("component", "cluster"), timeout: o.NATS.ConnectTimeout}
	ccfg := o.Config()
	ccfg.OnStatus, ccfg.Logger, ccfg.Registerer = cm.onStatus, cm.log, a.reg
	// A peer's state is its requests and marks, each up to its
	// max_active_requests; peers may be configured larger.
	ccfg.MaxStateChanges = max(1<<20, 4*a.cfg.Scoring.MaxActiveRequests)
	node, err := cluster.Connect(ccfg)
	if err != nil {
		return fmt.Errorf("cluster mode (--nats-url): %w", err)
	}
	cm.node = node
	a.cluster = cm
	a.AddCloser(func() {
		if err := node.Close(); err != nil {
			a.log.Warn("closing the NATS connection", "err", err)
		}
	})
	cm.log.Info("cluster mode on", "nats", cluster.URLForLog(o.NATS.URL), "replica_id", o.ReplicaID, "prefix", o.NATS.Prefix)
	return nil
}

func (cm *clusterMode) registry() cluster.Registry {
	return cluster.Registry{Node: cm.node, Timeout: cm.timeout}
}

// serveHealth makes hs report the NATS connection as ClusterHealthService.
func (cm *clusterMode) serveHealth(hs *health.Server) {
	cm.health.Store(hs)
	cm.onStatus(cm.node.Connected())
}

func (cm *clusterMode) onStatus(up bool) {
	hs := cm.health.Load()
	if hs == nil {
		return
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if up {
		st = healthpb.HealthCheckResponse_SERVING
	}
	hs.SetServingStatus(ClusterHealthService, st)
}
