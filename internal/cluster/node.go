package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures Connect.
type Config struct {
	// URL is the NATS server URL (a comma-separated list is tried in
	// turn). Required.
	URL string
	// CredsFile is a NATS credentials file (user JWT and nkey seed).
	CredsFile string
	// TLS: a CA bundle to verify the server with, and a client certificate
	// and key for mTLS. Empty fields are not used.
	TLSCA, TLSCert, TLSKey string
	// Prefix names the bucket, object store and subjects: <prefix>-registry,
	// <prefix>-snapshots, <prefix>.load.<replica>, <prefix>.state.<replica>.
	// Default "kvrouter".
	Prefix string
	// ReplicaID names this replica on the subjects; letters, digits, '-'
	// and '_'. Required.
	ReplicaID string
	// Replicas is the JetStream replica count of the bucket and the object
	// store when this replica creates them (1..5; default 1). An existing
	// bucket keeps its own.
	Replicas int
	// ConnectTimeout bounds Connect: the dial and the bucket set-up.
	// Default 5s.
	ConnectTimeout time.Duration
	// FlushInterval is how long a change may wait to be batched with
	// others before it is published. Default 1ms.
	FlushInterval time.Duration
	// ConfirmTimeout bounds the round trip to the server that Sync waits
	// for (a mark's answer). Default 1s.
	ConfirmTimeout time.Duration
	// DecideTimeout bounds the wait for the deciding replica's answer to a
	// forwarded Route, past which the Route is decided here (decide.go).
	// Default 50ms.
	DecideTimeout time.Duration
	// MaxBatchBytes flushes a batch that reaches it. Default 64 KiB.
	MaxBatchBytes int
	// HeartbeatInterval is how often a replica publishes its digest (and
	// an empty batch when idle), so others notice a gap or drift. Default 1s.
	HeartbeatInterval time.Duration
	// BootstrapWait is how long a starting replica collects the other
	// replicas' load state. Default 300ms.
	BootstrapWait time.Duration
	// MaxStateChanges bounds a state reply another replica sends (its
	// active requests and the marks it holds); a larger one is refused.
	// Default 1<<20.
	MaxStateChanges int
	// SnapshotsKept is how many snapshot objects the object store keeps
	// (the newest). Default 4.
	SnapshotsKept int
	// OnStatus, when set, is called when the connection to NATS is lost
	// (false) and back (true).
	OnStatus func(connected bool)
	// Logger receives connection changes and refusals; nil discards.
	Logger *slog.Logger
	// Registerer receives the kvrouter_cluster_* metrics; nil registers none.
	Registerer prometheus.Registerer
}

// DefaultPrefix is the default Config.Prefix.
const DefaultPrefix = "kvrouter"

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (c Config) withDefaults() (Config, error) {
	if c.URL == "" {
		return c, errors.New("cluster: Config.URL is required")
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !tokenRE.MatchString(c.Prefix) {
		return c, fmt.Errorf("cluster: prefix %q: want letters, digits, '-' and '_'", c.Prefix)
	}
	if !tokenRE.MatchString(c.ReplicaID) {
		return c, fmt.Errorf("cluster: replica id %q: want letters, digits, '-' and '_' (it is a NATS subject token)", c.ReplicaID)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return c, errors.New("cluster: the NATS TLS client certificate and key go together")
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return c, fmt.Errorf("cluster: replicas %d: want 1..5", c.Replicas)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ConnectTimeout, 5*time.Second)
	def(&c.FlushInterval, time.Millisecond)
	def(&c.ConfirmTimeout, time.Second)
	def(&c.DecideTimeout, 50*time.Millisecond)
	def(&c.HeartbeatInterval, time.Second)
	def(&c.BootstrapWait, 300*time.Millisecond)
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 64 << 10
	}
	if c.MaxStateChanges <= 0 {
		c.MaxStateChanges = 1 << 20
	}
	if c.SnapshotsKept <= 0 {
		c.SnapshotsKept = 4
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Node is this replica's membership of the cluster: its NATS connection,
// the registry bucket, the snapshot store and the load sync.
type Node struct {
	cfg     Config
	log     *slog.Logger
	nc      *nats.Conn
	kv      jetstream.KeyValue
	obs     jetstream.ObjectStore
	metrics *metrics
	epoch   uint64

	connected atomic.Bool
	pub       publisher
	sync      loadSync
	decide    decide

	stop      chan struct{}
	closeOnce sync.Once
	rewatch   chan struct{} // the connection is back: restart the registry watch
	wg        sync.WaitGroup
}

// Connect dials NATS, creates (or opens) the registry bucket and the
// snapshot store, and starts the change publisher. An unreachable server,
// a refused login or a server without JetStream is an error within
// Config.ConnectTimeout. Once connected, a lost connection is retried for
// ever (Config.OnStatus and the kvrouter_cluster_connected metric tell).
func Connect(cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger, metrics: m, epoch: uint64(time.Now().UnixNano()),
		stop: make(chan struct{}), rewatch: make(chan struct{}, 1)}
	n.pub.init(n)
	n.sync.init(n)
	opts := []nats.Option{
		nats.Name("kvrouter " + cfg.ReplicaID),
		nats.Timeout(cfg.ConnectTimeout),
		nats.NoEcho(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(n.onDisconnect),
		nats.ReconnectHandler(n.onReconnect),
		nats.ErrorHandler(n.onAsyncError),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	n.nc, err = nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to NATS at %s: %w", cfg.URL, err)
	}
	if err := n.openBuckets(); err != nil {
		n.nc.Close()
		return nil, err
	}
	n.setConnected(true)
	n.wg.Go(n.pub.run)
	return n, nil
}

// openBuckets opens the registry bucket and the snapshot store, creating
// them when they do not exist. An existing one is opened as it is: an
// update with this replica's settings would change it under the others
// (a replica started with --nats-replicas 1 would scale a bucket of 3
// replicas down to 1).
func (n *Node) openBuckets() error {
	js, err := jetstream.New(n.nc)
	if err != nil {
		return fmt.Errorf("cluster: jetstream: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ConnectTimeout)
	defer cancel()
	kvCfg := jetstream.KeyValueConfig{
		Bucket:      n.registryBucket(),
		Description: "kvrouter worker registry: a key per worker id",
		History:     5,
		Storage:     jetstream.FileStorage,
		Replicas:    n.cfg.Replicas,
	}
	n.kv, err = openOrCreate(ctx, js.KeyValue, js.CreateKeyValue, kvCfg.Bucket, kvCfg)
	if err != nil {
		return fmt.Errorf("cluster: registry bucket %s: %w", n.registryBucket(), err)
	}
	obsCfg := jetstream.ObjectStoreConfig{
		Bucket:      n.snapshotBucket(),
		Description: "kvrouter index snapshots, one object per replica",
		Storage:     jetstream.FileStorage,
		Replicas:    n.cfg.Replicas,
	}
	n.obs, err = openOrCreate(ctx, js.ObjectStore, js.CreateObjectStore, obsCfg.Bucket, obsCfg)
	if err != nil {
		return fmt.Errorf("cluster: snapshot store %s: %w", n.snapshotBucket(), err)
	}
	return nil
}

// openOrCreate opens bucket, or creates it with cfg when there is none; of
// two replicas creating it at once, the second opens the first's.
func openOrCreate[B, C any](ctx context.Context, open func(context.Context, string) (B, error),
	create func(context.Context, C) (B, error), bucket string, cfg C) (B, error) {
	b, err := open(ctx, bucket)
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return b, err
	}
	b, err = create(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return open(ctx, bucket)
	}
	return b, err
}

func (n *Node) registryBucket() string { return n.cfg.Prefix + "-registry" }
func (n *Node) snapshotBucket() string { return n.cfg.Prefix + "-snapshots" }
func (n *Node) loadSubject(id string) string {
	return n.cfg.Prefix + ".load." + id
}
func (n *Node) stateSubject(id string) string {
	if id == "" {
		return n.cfg.Prefix + ".state"
	}
	return n.cfg.Prefix + ".state." + id
}

// ReplicaID is this replica's id.
func (n *Node) ReplicaID() string { return n.cfg.ReplicaID }

// Done is closed when Close is called: a registry watch callback that
// waits stops waiting.
func (n *Node) Done() <-chan struct{} { return n.stop }

// Connected reports whether the NATS connection is up.
func (n *Node) Connected() bool { return n.connected.Load() }

func (n *Node) setConnected(up bool) {
	if n.connected.Swap(up) == up {
		return
	}
	if up {
		n.metrics.connected.Set(1)
	} else {
		n.metrics.connected.Set(0)
	}
	if n.cfg.OnStatus != nil {
		n.cfg.OnStatus(up)
	}
}

func (n *Node) onDisconnect(_ *nats.Conn, err error) {
	select {
	case <-n.stop:
		return // closing
	default:
	}
	n.metrics.disconnects.Inc()
	n.log.Warn("NATS connection lost; routing goes on from local state, load is resynchronised when it is back", "err", err)
	n.setConnected(false)
}

func (n *Node) onReconnect(nc *nats.Conn) {
	n.log.Info("NATS connection back; resynchronising load", "server", nc.ConnectedUrlRedacted())
	n.setConnected(true)
	signal(n.rewatch)
	n.sync.lost(resyncLost)
}

func (n *Node) onAsyncError(_ *nats.Conn, sub *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrSlowConsumer) {
		n.metrics.slowConsumer.Inc()
		n.log.Warn("NATS slow consumer: load changes were dropped; resynchronising", "subject", subjectOf(sub))
		n.sync.lost(resyncLost)
		return
	}
	n.log.Warn("NATS error", "subject", subjectOf(sub), "err", err)
}

func subjectOf(sub *nats.Subscription) string {
	if sub == nil {
		return ""
	}
	return sub.Subject
}

// Close stops the load sync, flushes what is queued and closes the
// connection.
func (n *Node) Close() error {
	first := false
	n.closeOnce.Do(func() { first = true })
	if !first {
		return nil
	}
	close(n.stop)
	n.decide.stopServing()
	n.wg.Wait()
	n.sync.close()
	err := n.nc.FlushTimeout(time.Second)
	n.nc.Close()
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("cluster: flush on close: %w", err)
	}
	return nil
}
