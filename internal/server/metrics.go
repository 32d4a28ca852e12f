package server

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// metrics are the RPC-level Prometheus metrics.
type metrics struct {
	latency   *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	decisions *prometheus.CounterVec
	hitRatio  prometheus.Histogram
	workers   prometheus.Gauge
	active    *activeCollector

	// The Route methods' latency series, looked up once: a label lookup
	// hashes the method name on every call.
	routeLatency, streamLatency prometheus.Observer

	// The bounded-load guard's diversions and the prefill they cost.
	diverted, divertedBlocks prometheus.Counter

	// Why Routes chose their workers, and the blocks they matched against
	// round robin's expectation.
	choices                     *prometheus.CounterVec
	byReason                    map[string]prometheus.Counter
	promptBlocks, matchedBlocks prometheus.Counter
	randomMatched               prometheus.Counter
	imbalance                   *imbalanceCollector
}

// newMetrics registers the RPC metrics with reg (nil: registers nothing).
func newMetrics(reg prometheus.Registerer, s *Server) (*metrics, error) {
	m := &metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvrouter_rpc_duration_seconds",
			Help:    "Latency of kvrouter gRPC calls, by method.",
			Buckets: []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3, 0.25},
		}, []string{"method"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_rpc_errors_total",
			Help: "kvrouter gRPC calls that failed, by method and status code.",
		}, []string{"method", "code"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_rpc_rejected_total",
			Help: "kvrouter gRPC calls refused by a limit, by limit: prompt_tokens, mm_items, request_id_bytes (InvalidArgument), active_requests, workers (ResourceExhausted), dp_size (InvalidArgument), busy (ResourceExhausted: every worker of the model over its busy thresholds).",
		}, []string{"reason"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_route_decisions_total",
			Help: "Route decisions, by chosen worker.",
		}, []string{"worker"}),
		hitRatio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvrouter_route_matched_ratio",
			Help:    "Matched blocks / prompt blocks of the chosen worker: the router's view of its hit rate.",
			Buckets: prometheus.LinearBuckets(0, 0.1, 11),
		}),
		diverted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_route_balance_diverted_total",
			Help: "Routes the bounded-load guard (--balance-factor) sent away from the cheapest worker, which was over its bound.",
		}),
		divertedBlocks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_route_balance_diverted_blocks_total",
			Help: "Prompt blocks the cheapest worker held beyond the chosen one's in Routes the guard diverted: prefill spent for balance.",
		}),
		choices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_route_choices_total",
			Help: "Route decisions by why the worker was chosen: cache (it holds the most of the prompt, more than another candidate), load (the cost chose otherwise: equal matches, or load over a longer match), guard (the bounded-load guard excluded the cheapest), sampled (temperature sampling chose other than the cheapest), single (one candidate).",
		}, []string{"reason"}),
		promptBlocks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_route_prompt_blocks_total",
			Help: "Prompt blocks of routed prompts.",
		}),
		matchedBlocks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_route_matched_blocks_total",
			Help: "Blocks of routed prompts the chosen worker held (index and predictions): the router's view of its hits.",
		}),
		randomMatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_route_random_matched_blocks_total",
			Help: "Blocks of routed prompts a uniformly random candidate would have held, in expectation: round robin's hits, to compare kvrouter_route_matched_blocks_total with.",
		}),
		imbalance: &imbalanceCollector{s: s, desc: prometheus.NewDesc(
			"kvrouter_route_load_imbalance",
			"The largest rank's recent routed prefill over the mean of its model's ranks (1: even; the guard holds a rank at --balance-factor), by model; 0 before the model's first Route.",
			[]string{"model"}, nil)},
		workers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_registered_workers",
			Help: "Registered workers.",
		}),
		active: &activeCollector{s: s, desc: prometheus.NewDesc(
			"kvrouter_active_requests", "Routed requests not yet finished, by worker and rank.",
			[]string{"worker", "dp_rank"}, nil),
			rate: prometheus.NewDesc(
				"kvrouter_prefill_tokens_per_second", "The time policy's estimate of a worker/rank's prefill throughput, learned from MarkPrefillDone timings (the prior, --prefill-tokens-per-second, until it has some).",
				[]string{"worker", "dp_rank"}, nil)},
	}
	m.routeLatency = m.latency.WithLabelValues(routeMethod)
	m.streamLatency = m.latency.WithLabelValues(routeStreamMethod)
	for _, reason := range []string{scoring.LimitPromptTokens, scoring.LimitMMItems, scoring.LimitRequestIDBytes,
		scoring.LimitActiveRequests, scoring.LimitWorkers, scoring.LimitDPSize, scoring.LimitBusy} {
		m.rejected.WithLabelValues(reason) // reported at 0 from the start
	}
	m.byReason = make(map[string]prometheus.Counter, len(scoring.Reasons))
	for _, reason := range scoring.Reasons {
		m.byReason[reason] = m.choices.WithLabelValues(reason)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.latency, m.errors, m.rejected, m.decisions, m.hitRatio, m.diverted, m.divertedBlocks, m.workers, m.active,
			m.choices, m.promptBlocks, m.matchedBlocks, m.randomMatched, m.imbalance} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

const (
	routeMethod       = kvrouterv1.Router_Route_FullMethodName
	routeStreamMethod = kvrouterv1.Router_RouteStream_FullMethodName
)

func (m *metrics) observe(method string, d time.Duration, code codes.Code) {
	switch method {
	case routeMethod:
		m.routeLatency.Observe(d.Seconds())
	case routeStreamMethod:
		m.streamLatency.Observe(d.Seconds())
	default:
		m.latency.WithLabelValues(method).Observe(d.Seconds())
	}
	if code != codes.OK {
		m.errors.WithLabelValues(method, code.String()).Inc()
	}
}

// reject counts a call refused by the limit named reason.
func (m *metrics) reject(reason string) {
	m.rejected.WithLabelValues(reason).Inc()
}

func (m *metrics) decision(d *scoring.Decision) {
	m.decisions.WithLabelValues(d.WorkerID).Inc()
	if d.PromptBlocks > 0 {
		m.hitRatio.Observe(float64(d.Matched) / float64(d.PromptBlocks))
	}
	if d.Diverted {
		m.diverted.Inc()
		m.divertedBlocks.Add(float64(d.DivertedBlocks))
	}
	if c, ok := m.byReason[d.Reason]; ok {
		c.Inc()
	}
	m.promptBlocks.Add(float64(d.PromptBlocks))
	m.matchedBlocks.Add(float64(d.Matched))
	m.randomMatched.Add(d.RandomMatched)
}

func (m *metrics) forgetWorker(id string) {
	m.decisions.DeleteLabelValues(id)
}

// activeCollector reports active requests per worker/rank at scrape time.
type activeCollector struct {
	s    *Server
	desc *prometheus.Desc
	rate *prometheus.Desc
}

func (c *activeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc; ch <- c.rate }

func (c *activeCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.s.ready.Load() {
		return
	}
	for _, l := range c.s.router.Loads() {
		rank := strconv.FormatUint(uint64(l.DPRank), 10)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(l.Active), l.WorkerID, rank)
		ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, l.PrefillTokensPerSecond, l.WorkerID, rank)
	}
}

// imbalanceCollector reports each model's load imbalance at scrape time.
type imbalanceCollector struct {
	s    *Server
	desc *prometheus.Desc
}

func (c *imbalanceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *imbalanceCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.s.ready.Load() {
		return
	}
	for _, im := range c.s.router.Imbalances() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, im.Ratio, im.Model)
	}
}
