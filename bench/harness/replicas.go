package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// ReplicasConfig describes N router processes behind one gateway.
type ReplicasConfig struct {
	// N is the number of routers (at least 1).
	N int
	// Router is the template of every replica; GRPCAddr and HTTPAddr, when
	// set, are the first replica's and the others take the next ports.
	Router RouterConfig
	// NATSURL, when set, starts every replica in cluster mode
	// (--nats-url, --replica-id); empty starts N independent routers.
	NATSURL string
	// Logs, when set, gives replica i's log writer.
	Logs func(i int) io.Writer
	// ReadyTimeout bounds the wait for each replica's health to say SERVING
	// (a cluster replica is NOT_SERVING until it has bootstrapped; default 30 s).
	ReadyTimeout time.Duration
}

// Replicas is a running set of routers.
type Replicas struct {
	Routers []*Router
	// Sync reports cluster mode (the replicas share NATS).
	Sync bool
}

// ReplicaID is the --replica-id of replica i.
func ReplicaID(i int) string { return "replica-" + strconv.Itoa(i) }

// StartReplicas starts the routers one after the other and waits until each
// answers and reports SERVING.
func StartReplicas(ctx context.Context, cfg ReplicasConfig) (*Replicas, error) {
	if cfg.N < 1 {
		return nil, fmt.Errorf("replicas: n = %d, want at least 1", cfg.N)
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	rs := &Replicas{Sync: cfg.NATSURL != ""}
	for i := 0; i < cfg.N; i++ {
		rc := cfg.Router
		rc.Args = append([]string(nil), cfg.Router.Args...)
		var err error
		if rc.GRPCAddr, err = offsetAddr(cfg.Router.GRPCAddr, i); err != nil {
			rs.Stop()
			return nil, err
		}
		if rc.HTTPAddr, err = offsetAddr(cfg.Router.HTTPAddr, i); err != nil {
			rs.Stop()
			return nil, err
		}
		if rs.Sync {
			rc.Args = append(rc.Args, "--nats-url", cfg.NATSURL, "--replica-id", ReplicaID(i))
		}
		if cfg.Logs != nil {
			rc.Log = cfg.Logs(i)
		}
		r, err := StartRouter(ctx, rc)
		if err != nil {
			rs.Stop()
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		rs.Routers = append(rs.Routers, r)
		if err := r.WaitServing(ctx, cfg.ReadyTimeout); err != nil {
			rs.Stop()
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
	}
	return rs, nil
}

// offsetAddr is addr with its port increased by i ("" stays "": a free port).
func offsetAddr(addr string, i int) (string, error) {
	if addr == "" || i == 0 {
		return addr, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("address %q: port: %w", addr, err)
	}
	return host + ":" + strconv.Itoa(p+i), nil
}

// WaitServing polls grpc.health.v1 until the router reports SERVING.
func (r *Router) WaitServing(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := r.Health(ctx)
		if err == nil && st == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("router %s not SERVING within %v (last: %v, %v)", r.GRPCAddr, timeout, st, err)
		}
		select {
		case <-r.exited:
			return fmt.Errorf("router exited before SERVING: %v", r.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Register registers the fleet with the replicas: in cluster mode once, on
// replica 0 (the registry is shared), else with every replica. Then it waits
// until every replica lists every engine as connected, so no replica misses
// the first events.
func (rs *Replicas) Register(ctx context.Context, f *Fleet, model string, timeout time.Duration) error {
	targets := rs.Routers
	if rs.Sync {
		targets = rs.Routers[:1]
	}
	for _, r := range targets {
		if err := f.Register(ctx, r.Registry, model, timeout); err != nil {
			return fmt.Errorf("replica %s: %w", r.GRPCAddr, err)
		}
	}
	for i, r := range rs.Routers {
		if err := WaitConnected(ctx, r.Registry, model, len(f.Engines), timeout); err != nil {
			return fmt.Errorf("replica %d: %w", i, err)
		}
	}
	return nil
}

// WaitConnected polls ListWorkers until n ranks of model are listed and
// connected.
func WaitConnected(ctx context.Context, reg kvrouterv1.RegistryClient, model string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := reg.ListWorkers(cctx, &kvrouterv1.ListWorkersRequest{Model: model})
		cancel()
		connected := 0
		if err == nil {
			for _, w := range resp.Workers {
				if w.Connected {
					connected++
				}
			}
			if connected >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d engines connected within %v (last error %v)", connected, n, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// CPUTime sums the CPU time of the replicas still running; a killed one
// contributes what it had used when last read by Kill.
func (rs *Replicas) CPUTime() (time.Duration, error) {
	var sum time.Duration
	for _, r := range rs.Routers {
		select {
		case <-r.Exited():
			sum += r.lastCPU
			continue
		default:
		}
		c, err := r.CPUTime()
		if err != nil {
			return 0, err
		}
		r.lastCPU = c
		sum += c
	}
	return sum, nil
}

// KillReplica reads replica i's CPU time and sends it SIGKILL.
func (rs *Replicas) KillReplica(i int) error {
	r := rs.Routers[i]
	if c, err := r.CPUTime(); err == nil {
		r.lastCPU = c
	}
	return r.Kill()
}

// EventsApplied is replica i's sum of events_applied.
func (rs *Replicas) EventsApplied(ctx context.Context, i int, model string) (uint64, error) {
	return EventsApplied(ctx, rs.Routers[i].Registry, model)
}

// loadSyncSeries are the load sync counters on a replica's /metrics: the
// changes it published, then those it received and applied, or refused (a
// worker not registered there yet, a full table).
var loadSyncSeries = []string{`kvrouter_cluster_changes_total{result="sent"}`,
	`kvrouter_cluster_changes_total{result="applied"}`, `kvrouter_cluster_changes_total{result="unknown_worker"}`,
	`kvrouter_cluster_changes_total{result="refused"}`}

// LoadSynced reports whether every live replica has received every load
// change the other live replicas had published when it was called. Each
// replica's counters are read once, one replica after another, all after
// the call: a sent count read after a replica's received count can only
// be larger, so the check errs toward waiting, never toward passing with
// a change in flight. A replica's received count may include a state
// transfer's changes; a replica that exited is left out.
func (rs *Replicas) LoadSynced() (bool, error) {
	var sent, received []float64
	for _, r := range rs.Routers {
		select {
		case <-r.Exited():
			continue
		default:
		}
		v, err := r.MetricSeries(loadSyncSeries...)
		if err != nil {
			return false, err
		}
		sent, received = append(sent, v[0]), append(received, v[1]+v[2]+v[3])
	}
	var all float64
	for _, v := range sent {
		all += v
	}
	for i := range sent {
		if received[i] < all-sent[i] {
			return false, nil
		}
	}
	return true, nil
}

// Stop stops every replica still running.
func (rs *Replicas) Stop() {
	for _, r := range rs.Routers {
		r.Stop()
	}
}

// ActiveRequests sums the router's kvrouter_active_requests gauge (routed
// requests not yet finished, its own and, in cluster mode, the other
// replicas') from /metrics.
func (r *Router) ActiveRequests() (float64, error) {
	return r.MetricSum("kvrouter_active_requests")
}

// MetricSum sums metric name (MetricSum of each) over the replicas still
// running; a killed one's series are gone with it.
func (rs *Replicas) MetricSum(name string) (float64, error) {
	var sum float64
	for _, r := range rs.Routers {
		select {
		case <-r.Exited():
			continue
		default:
		}
		v, err := r.MetricSum(name)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// ActiveAfter polls every live replica's ActiveRequests until all are 0 or
// timeout passes, and returns the last values (-1 for a replica that exited).
func (rs *Replicas) ActiveAfter(ctx context.Context, timeout time.Duration) ([]float64, error) {
	deadline := time.Now().Add(timeout)
	for {
		out := make([]float64, len(rs.Routers))
		busy := false
		for i, r := range rs.Routers {
			select {
			case <-r.Exited():
				out[i] = -1
				continue
			default:
			}
			v, err := r.ActiveRequests()
			if err != nil {
				return nil, err
			}
			out[i] = v
			busy = busy || v > 0
		}
		if !busy || time.Now().After(deadline) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
