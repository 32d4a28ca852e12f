package epp

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons a message or a mark is skipped, in kvrouter_epp_skipped_total.
const (
	skipDuplicateEOS  = "duplicate_end_of_stream" // a request body after its end (Envoy, bodies over ~1 MB)
	skipServedOther   = "served_elsewhere"        // the gateway served another endpoint than the pick
	skipSubsetMoved   = "subset_moved"            // the subset hint moved the pick off the router's choice
	skipMarkFailed    = "mark_failed"             // a prefill-done or finished mark the router refused
	skipConformance   = "conformance_pick"        // the test header chose the endpoint
	skipUnknownFrame  = "unknown_message"         // a ProcessingRequest of no kind the picker knows
	skipBodyAfterPick = "request_body_after_pick" // body chunks of a header-only request
)

type metrics struct {
	requests *prometheus.CounterVec
	skipped  *prometheus.CounterVec
	streams  prometheus.Gauge
	buffered prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_epp_requests_total",
			Help: "Requests the endpoint picker answered, by HTTP status (200: routed; others: an immediate response).",
		}, []string{"status"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_epp_skipped_total",
			Help: "Messages, marks and picks the endpoint picker skipped or overrode, by reason.",
		}, []string{"reason"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_epp_streams",
			Help: "ext_proc streams being served.",
		}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_epp_buffered_bytes",
			Help: "Request body bytes the picker holds.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.skipped, m.streams, m.buffered} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) answered(status int) { m.requests.WithLabelValues(strconv.Itoa(status)).Inc() }
func (m *metrics) skip(reason string)  { m.skipped.WithLabelValues(reason).Inc() }
