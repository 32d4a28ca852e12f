package discovery

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics tell an operator what discovery sees that the registry does not
// show: the pods and records each source found but could not use (bad
// annotations, SRV targets with no address), the looks that failed and so
// left the last report standing, and the registry's refusals. A nil
// *Metrics counts nothing.
type Metrics struct {
	workers  *prometheus.GaugeVec
	skipped  *prometheus.GaugeVec
	failures *prometheus.CounterVec
	refused  prometheus.Counter
}

// NewMetrics registers discovery's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvrouter_discovery_workers",
			Help: "Workers a discovery source found on its last look, by source.",
		}, []string{"source"}),
		skipped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvrouter_discovery_skipped",
			Help: "Pods or DNS records a discovery source found on its last look but could not make a worker of (each is logged with its reason), by source.",
		}, []string{"source"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_discovery_lookup_failures_total",
			Help: "Looks of a discovery source that failed (the API or DNS server, a missing InferencePool), so its last report stands, by source.",
		}, []string{"source"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_discovery_registry_errors_total",
			Help: "Registrations and removals discovery asked for that the registry refused (retried after discovery.retry_interval).",
		}),
	}
	for _, c := range []prometheus.Collector{m.workers, m.skipped, m.failures, m.refused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) looked(source string, workers, skipped int) {
	if m == nil {
		return
	}
	m.workers.WithLabelValues(source).Set(float64(workers))
	m.skipped.WithLabelValues(source).Set(float64(skipped))
}

func (m *Metrics) failed(source string) {
	if m != nil {
		m.failures.WithLabelValues(source).Inc()
	}
}

func (m *Metrics) refusals(n int) {
	if m != nil && n > 0 {
		m.refused.Add(float64(n))
	}
}
