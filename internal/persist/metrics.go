package persist

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	writes      *prometheus.CounterVec // result
	duration    prometheus.Gauge
	bytes       prometheus.Gauge
	residencies prometheus.Gauge
	lastSuccess prometheus.Gauge
	refused     *prometheus.CounterVec // file kind
	restoreTime prometheus.Gauge
	restoredRes prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_snapshot_writes_total", Help: "Index snapshots written, by result (ok, error).",
		}, []string{"result"}),
		duration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_snapshot_duration_seconds", Help: "Time the last successful snapshot took to write.",
		}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_snapshot_bytes", Help: "Size of the last snapshot written.",
		}),
		residencies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_snapshot_residencies", Help: "(block, worker/rank) pairs in the last snapshot written.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_snapshot_last_success_timestamp_seconds", Help: "Unix time of the last successful snapshot.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_state_files_refused_total", Help: "State files refused as bad (moved aside), by kind (registry, snapshot).",
		}, []string{"kind"}),
		restoreTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_restore_duration_seconds", Help: "Time the start-up restore of the index took.",
		}),
		restoredRes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_restore_residencies", Help: "(block, worker/rank) pairs restored from the snapshot at start-up.",
		}),
	}
	m.writes.WithLabelValues("ok")
	m.writes.WithLabelValues("error")
	m.refused.WithLabelValues("registry")
	m.refused.WithLabelValues("snapshot")
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.writes, m.duration, m.bytes, m.residencies, m.lastSuccess, m.refused, m.restoreTime, m.restoredRes} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}
