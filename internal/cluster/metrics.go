package cluster

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connected    prometheus.Gauge
	disconnects  prometheus.Counter
	slowConsumer prometheus.Counter
	messages     *prometheus.CounterVec // direction
	bytes        *prometheus.CounterVec // direction
	changes      *prometheus.CounterVec // result
	dropped      prometheus.Counter
	resyncs      *prometheus.CounterVec // reason
	resyncFails  prometheus.Counter
	registry     *prometheus.CounterVec // op
	snapshots    *prometheus.CounterVec // result
	refused      prometheus.Counter

	confirmFails   prometheus.Counter
	confirmSeconds prometheus.Histogram

	decisions      *prometheus.CounterVec // result
	forwardSeconds prometheus.Histogram
}

// Results in kvrouter_cluster_decisions_total: of a Route this replica
// forwarded (forwarded, refused, unreachable, malformed: all but the first
// decided here), and of one it was forwarded (served, served_refused,
// malformed).
const (
	decisionForwarded     = "forwarded"
	decisionRefused       = "refused"
	decisionUnreachable   = "unreachable"
	decisionMalformed     = "malformed"
	decisionServed        = "served"
	decisionServedRefused = "served_refused"
)

// Results of a received change in kvrouter_cluster_changes_total.
const (
	changeSent          = "sent"
	changeApplied       = "applied"
	changeUnknownWorker = "unknown_worker"
	changeRefused       = "refused"
	changeMalformed     = "malformed"
	// A message of an origin past maxOrigins (changes not counted one by one).
	changeTooManyOrigins = "too_many_origins"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_cluster_connected", Help: "1 while the replica is connected to NATS, 0 while it routes on local state alone.",
		}),
		disconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_cluster_disconnects_total", Help: "NATS connections lost.",
		}),
		slowConsumer: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_cluster_slow_consumer_total", Help: "Times NATS dropped messages for this replica (slow consumer); each starts a resync.",
		}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_cluster_messages_total", Help: "Load sync messages, by direction (out, in).",
		}, []string{"direction"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_cluster_bytes_total", Help: "Load sync payload bytes, by direction (out, in).",
		}, []string{"direction"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_cluster_changes_total", Help: "Load changes sent, and received by result (applied, unknown_worker, refused, malformed).",
		}, []string{"result"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_cluster_changes_dropped_total", Help: "Local changes not published because the send buffer was full (the peers resync).",
		}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_cluster_resyncs_total", Help: "Load state requests to another replica, by reason (new, epoch, gap, digest, lost, bootstrap).",
		}, []string{"reason"}),
		resyncFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_cluster_resync_failures_total", Help: "Load state requests that got no complete answer.",
		}),
		registry: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_cluster_registry_events_total", Help: "Registry bucket changes seen, by op (put, delete).",
		}, []string{"op"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_cluster_snapshot_uploads_total", Help: "Index snapshots put in the object store, by result (ok, error).",
		}, []string{"result"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_cluster_snapshot_objects_refused_total", Help: "Snapshot objects refused at bootstrap (bad digest or content).",
		}),
		confirmFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_cluster_confirm_failures_total", Help: "Round trips to the NATS server confirming a mark's change that failed or timed out (the mark was answered anyway).",
		}),
		confirmSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kvrouter_cluster_confirm_seconds", Help: "Round trips to the NATS server that confirm marks' changes before the marks are answered.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 9),
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_cluster_decisions_total", Help: "Routes forwarded to the deciding replica, by result (forwarded: it decided; refused, unreachable, malformed: decided here), and Routes other replicas forwarded here (served, served_refused, malformed).",
		}, []string{"result"}),
		forwardSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kvrouter_cluster_forward_seconds", Help: "Round trips of Routes forwarded to the deciding replica and answered.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 9),
		}),
	}
	for _, d := range []string{"out", "in"} {
		m.messages.WithLabelValues(d)
		m.bytes.WithLabelValues(d)
	}
	for _, r := range []string{changeSent, changeApplied, changeUnknownWorker, changeRefused, changeMalformed, changeTooManyOrigins} {
		m.changes.WithLabelValues(r)
	}
	for _, r := range []string{decisionForwarded, decisionRefused, decisionUnreachable, decisionMalformed, decisionServed, decisionServedRefused} {
		m.decisions.WithLabelValues(r)
	}
	for _, r := range []string{resyncNew, resyncEpoch, resyncGap, resyncDigest, resyncLost, resyncBootstrap, resyncHeld} {
		m.resyncs.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.connected, m.disconnects, m.slowConsumer, m.messages, m.bytes, m.changes,
		m.dropped, m.resyncs, m.resyncFails, m.registry, m.snapshots, m.refused, m.confirmFails, m.confirmSeconds, m.decisions, m.forwardSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("cluster: register metrics"), err)
		}
	}
	return m, nil
}
