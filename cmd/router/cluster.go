package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/cluster"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/server"
	"github.com/kvrouter/kvrouter/internal/state"
)

// Cluster mode: with --nats-url the router is one replica of several. The
// registry is the NATS bucket (the state dir's registry file is neither
// read nor written; the state dir keeps its lock and local snapshots), each
// replica follows every registered worker's engines itself, Route load and
// marks are shared, and a replica without a local snapshot starts from the
// newest one in the object store.

// clusterHealthService is the grpc.health.v1 service name whose status is
// the NATS connection's: SERVING while connected, NOT_SERVING while the
// replica routes on its local state alone. The overall status does not
// follow it: a replica without NATS still routes.
const clusterHealthService = "kvrouter.cluster"

// clusterMode is a replica's cluster side.
type clusterMode struct {
	node    *cluster.Node
	log     *slog.Logger
	timeout time.Duration
	health  atomic.Pointer[health.Server]
}

var replicaIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// defaultReplicaID is the host name and process id, with what a NATS
// subject token cannot hold replaced.
func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "kvrouter"
	}
	host = regexp.MustCompile(`[^A-Za-z0-9_-]`).ReplaceAllString(host, "_")
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

func (c *Config) validateCluster() error {
	if c.NATS.URL == "" {
		return nil
	}
	switch n := c.NATS; {
	case !replicaIDRE.MatchString(c.ReplicaID):
		return fmt.Errorf("config: replica_id %q: want letters, digits, '-' and '_' (it is a NATS subject token)", c.ReplicaID)
	case !replicaIDRE.MatchString(n.Prefix):
		return fmt.Errorf("config: nats.prefix %q: want letters, digits, '-' and '_'", n.Prefix)
	case (n.TLS.Cert == "") != (n.TLS.Key == ""):
		return fmt.Errorf("config: nats.tls.cert and nats.tls.key go together (got cert %q, key %q)", n.TLS.Cert, n.TLS.Key)
	case n.ConnectTimeout <= 0:
		return fmt.Errorf("config: nats.connect_timeout %v must be positive", n.ConnectTimeout)
	case n.Replicas < 1 || n.Replicas > 5:
		return fmt.Errorf("config: nats.replicas %d must be within 1..5", n.Replicas)
	}
	return nil
}

// connectCluster connects to NATS when cfg turns cluster mode on (nil
// otherwise). An unreachable server is an error within
// nats.connect_timeout.
func connectCluster(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*clusterMode, error) {
	if cfg.NATS.URL == "" {
		return nil, nil
	}
	cm := &clusterMode{log: log.With("component", "cluster"), timeout: cfg.NATS.ConnectTimeout}
	n := cfg.NATS
	node, err := cluster.Connect(cluster.Config{
		URL: n.URL, CredsFile: n.CredsFile, TLSCA: n.TLS.CA, TLSCert: n.TLS.Cert, TLSKey: n.TLS.Key,
		Prefix: n.Prefix, ReplicaID: cfg.ReplicaID, Replicas: n.Replicas, ConnectTimeout: n.ConnectTimeout,
		OnStatus: cm.onStatus, Logger: cm.log, Registerer: reg,
		// A peer's state is its requests and marks, each up to its
		// max_active_requests; peers may be configured larger.
		MaxStateChanges: max(1<<20, 4*cfg.MaxActiveRequests),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster mode (--nats-url): %w", err)
	}
	cm.node = node
	cm.log.Info("cluster mode on", "nats", natsURLForLog(n.URL), "replica_id", cfg.ReplicaID, "prefix", n.Prefix)
	return cm, nil
}

// serveHealth makes hs report the NATS connection as clusterHealthService.
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
	hs.SetServingStatus(clusterHealthService, st)
}

func (cm *clusterMode) close(log *slog.Logger) {
	if err := cm.node.Close(); err != nil {
		log.Warn("closing the NATS connection", "err", err)
	}
}

// clusterRegistry is the server's RegistryStore in cluster mode: the
// bucket. An API registration creates its key (refused when another
// replica holds the id: the bucket's revision decides); a config file's
// worker, which every replica declares alike, is put.
type clusterRegistry struct{ cm *clusterMode }

func (r clusterRegistry) Put(w *kvrouterv1.Worker, source server.Source) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cm.timeout)
	defer cancel()
	v, err := encodeWorker(w, source)
	if err != nil {
		return err
	}
	if source == server.SourceConfig {
		_, err = r.cm.node.PutWorker(ctx, w.WorkerId, v)
		return err
	}
	_, err = r.cm.node.CreateWorker(ctx, w.WorkerId, v)
	if errors.Is(err, cluster.ErrWorkerExists) {
		return fmt.Errorf("%w (by another replica)", server.ErrRegistered)
	}
	return err
}

func (r clusterRegistry) Delete(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cm.timeout)
	defer cancel()
	return r.cm.node.DeleteWorker(ctx, id)
}

// A registry value is a version byte, the source (length byte, bytes) and
// the kvrouter.v1.Worker.
const registryValueVersion = 1

func encodeWorker(w *kvrouterv1.Worker, source server.Source) ([]byte, error) {
	pb, err := proto.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode registration: %w", err)
	}
	if len(source) > 255 {
		return nil, fmt.Errorf("encode registration: source %q too long", source)
	}
	b := append([]byte{registryValueVersion, byte(len(source))}, source...)
	return append(b, pb...), nil
}

func decodeWorker(b []byte) (*kvrouterv1.Worker, server.Source, error) {
	if len(b) < 2 || b[0] != registryValueVersion || len(b) < 2+int(b[1]) {
		return nil, "", errors.New("registry value: not a version 1 registration")
	}
	src := server.Source(b[2 : 2+int(b[1])])
	w := &kvrouterv1.Worker{}
	if err := proto.Unmarshal(b[2+int(b[1]):], w); err != nil {
		return nil, "", fmt.Errorf("registry value: %w", err)
	}
	return w, src, nil
}

// followRegistry registers every worker of the bucket on srv, then
// follows the bucket's changes; it returns once the bucket's content is
// registered (or the connect timeout passes).
func (cm *clusterMode) followRegistry(srv *server.Server) error {
	loaded, err := cm.node.WatchWorkers(func(ev cluster.WorkerEvent) { cm.apply(srv, ev) })
	if err != nil {
		return err
	}
	select {
	case <-loaded:
		return nil
	case <-time.After(cm.timeout):
		return fmt.Errorf("cluster: the registry bucket did not load in %v", cm.timeout)
	}
}

// apply makes srv's registration of ev.ID the bucket's: the bucket is the
// registry, so a local registration that differs is replaced.
func (cm *clusterMode) apply(srv *server.Server, ev cluster.WorkerEvent) {
	cur, _, ok := srv.Registered(ev.ID)
	if ev.Deleted {
		if ok {
			if err := srv.Unregister(ev.ID, false); err != nil {
				cm.log.Warn("unregister (from the registry bucket)", "worker", ev.ID, "err", err)
			}
		}
		return
	}
	w, src, err := decodeWorker(ev.Value)
	if err != nil {
		cm.log.Error("registry entry skipped", "worker", ev.ID, "revision", ev.Revision, "err", err)
		return
	}
	if ok && proto.Equal(cur, w) {
		return // this replica's own registration, or one it applied
	}
	if ok {
		if err := srv.Unregister(ev.ID, false); err != nil {
			cm.log.Warn("replace registration (from the registry bucket)", "worker", ev.ID, "err", err)
		}
	}
	err = retryWhileRemoving(cm.node.Done(), removeWait, func() error { return srv.Register(w, src, false) })
	if err != nil {
		cm.log.Error("worker in the registry bucket not registered here", "worker", ev.ID, "revision", ev.Revision, "err", err)
	}
}

// removeWait bounds how long a registration from the bucket waits for this
// replica's removal of the same id to finish: longer than ingest's stop
// timeout.
const removeWait = 15 * time.Second

// retryWhileRemoving calls register until it is not refused because the
// id's previous subscriptions are still stopping (an unregistration here
// whose unfollow runs while the watch applies another replica's
// re-registration: dropping it would leave this replica without a worker
// every other one has), for up to wait or until done is closed.
func retryWhileRemoving(done <-chan struct{}, wait time.Duration, register func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := register()
		if err == nil || !strings.Contains(err.Error(), "still being removed") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-done:
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// registerFile registers the config file's workers: the file wins over
// the bucket for the ids it names.
func (cm *clusterMode) registerFile(srv *server.Server, file []WorkerConfig) error {
	for i, wc := range file {
		if err := registerFileWorker(srv, configWorker(wc)); err != nil {
			return fmt.Errorf("config: workers[%d]: %w", i, err)
		}
	}
	return nil
}

// registerFileWorker registers w unless it is registered alike. Another
// replica starting with the same file may put w in the bucket meanwhile,
// and the watch register it here between the check and the registration:
// then the check is made again.
func registerFileWorker(srv *server.Server, w *kvrouterv1.Worker) error {
	want := proto.Clone(w).(*kvrouterv1.Worker)
	want.DpSize = max(want.DpSize, 1)
	var err error
	for range 3 {
		if cur, src, ok := srv.Registered(w.WorkerId); ok {
			if src == server.SourceConfig && proto.Equal(cur, want) {
				return nil
			}
			if err = srv.Unregister(w.WorkerId, false); err != nil && status.Code(err) != codes.NotFound {
				return err
			}
		}
		if err = srv.Register(w, server.SourceConfig, true); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "already registered") {
			return err
		}
	}
	return err
}

// registeredIDs are the ids srv has registered.
func registeredIDs(srv *server.Server, ix *radix.Index) map[string]bool {
	out := map[string]bool{}
	for _, w := range ix.Workers() {
		if _, _, ok := srv.Registered(w.ID); ok {
			out[w.ID] = true
		}
	}
	return out
}

// restoreFromStore loads the newest snapshot object that reads back whole.
// A bad one (digest or content) is refused by name and the next newest
// tried; when reading fails otherwise (a timeout, an object pruned while
// it was read) the objects are listed again, up to three times. ok is
// false when there is none usable.
func (cm *clusterMode) restoreFromStore(icfg radix.Config, log *slog.Logger) (res persist.Restored, ok bool) {
	refused := map[string]bool{}
	for round := 1; round <= 3; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), cm.timeout)
		objs, err := cm.node.Snapshots(ctx)
		cancel()
		if err != nil {
			log.Error("snapshot objects not listed", "err", err)
			continue
		}
		for _, o := range objs {
			if refused[o.Name] {
				continue
			}
			res, err = cm.readObject(o, icfg)
			if err == nil {
				log.Info("index restored from the snapshot store", "object", o.Name, "bytes", o.Size, "written", o.ModTime,
					"ranks", res.Snapshot.Counts.Ranks, "residencies", res.Snapshot.Counts.Bindings, "took", res.Took)
				return res, true
			}
			if !badSnapshot(err) {
				log.Warn("snapshot object not read; listing again", "object", o.Name, "round", round, "err", err)
				break
			}
			refused[o.Name] = true
			cm.node.RefusedSnapshot(o.Name, err)
		}
	}
	return res, false
}

// readObject reads one snapshot object into an index, within a deadline
// that allows 4 MiB/s.
func (cm *clusterMode) readObject(o cluster.SnapshotObject, icfg radix.Config) (persist.Restored, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*cm.timeout+time.Duration(o.Size>>22)*time.Second)
	defer cancel()
	start := time.Now()
	r, err := cm.node.OpenSnapshot(ctx, o.Name)
	if err != nil {
		return persist.Restored{}, err
	}
	res, err := persist.ReadSnapshot(r, icfg)
	if cerr := r.Close(); err == nil && cerr != nil {
		err = cerr
	}
	res.Took = time.Since(start)
	return res, err
}

// badSnapshot reports whether err says the snapshot's content is bad, as
// opposed to its reading failing.
func badSnapshot(err error) bool {
	return errors.Is(err, cluster.ErrSnapshotCorrupt) || errors.Is(err, state.ErrCorrupt) || state.IsBadFile(err)
}

// uploadSnapshot puts the index in the object store: the local snapshot
// just written when there is a state dir, else a snapshot streamed from
// the index. Without NATS the local snapshot is still written, and the
// upload waits for the next interval.
func (b *backend) uploadSnapshot(cm *clusterMode, cpu float64, now bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fill := func(w io.Writer) error {
		_, err := persist.WriteSnapshot(w, b.index, b.ing, cpu)
		return err
	}
	if b.st != nil {
		snap := b.st.Snapshot
		if now {
			snap = b.st.SnapshotNow
		}
		info, err := snap(b.index, b.ing)
		if err != nil {
			return err
		}
		fill = func(w io.Writer) error {
			f, err := os.Open(info.Path)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(w, f)
			return err
		}
	}
	if !cm.node.Connected() {
		cm.log.Warn("snapshot not uploaded: NATS is not connected")
		return nil
	}
	obj, err := cm.node.PutSnapshot(ctx, fill)
	if err == nil {
		cm.log.Debug("snapshot uploaded", "object", obj.Name, "bytes", obj.Size)
	}
	return err
}

// natsURLForLog drops credentials from a URL list for the log.
func natsURLForLog(u string) string {
	var out []string
	for _, p := range strings.Split(u, ",") {
		if i := strings.Index(p, "@"); i >= 0 {
			if j := strings.Index(p, "://"); j >= 0 && j < i {
				p = p[:j+3] + "***" + p[i:]
			}
		}
		out = append(out, p)
	}
	return strings.Join(out, ",")
}
