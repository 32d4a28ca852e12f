// Package metricset lists, for tests, every metric family a router
// registers, with its type, help and labels: what the documentation's
// metrics reference and the alert rules' metric check compare against.
package metricset

import (
	"context"
	"errors"
	"io"
	"net"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/app"
	"github.com/kvrouter/kvrouter/internal/cluster"
	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
	"github.com/kvrouter/kvrouter/internal/discovery"
	"github.com/kvrouter/kvrouter/internal/docgen"
	"github.com/kvrouter/kvrouter/internal/epp"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
	"github.com/kvrouter/kvrouter/internal/status"
)

// customTypes are the types of families whose collectors are neither
// vectors nor collect a series without a registered worker, so Describe
// cannot tell; an entry no longer needed fails the test.
var customTypes = map[string]string{
	"kvrouter_ingest_capacity_blocks":          "gauge",
	"kvrouter_ingest_capacity_evictions_total": "counter",
	"kvrouter_ingest_catch_ups_limited_total":  "counter",
	"kvrouter_ingest_connected":                "gauge",
	"kvrouter_ingest_engine_restarts_total":    "counter",
	"kvrouter_ingest_gaps_total":               "counter",
	"kvrouter_ingest_inexact":                  "gauge",
	"kvrouter_ingest_last_seq":                 "gauge",
	"kvrouter_ingest_queue_budget_waits_total": "counter",
	"kvrouter_ingest_reconnects_total":         "counter",
	"kvrouter_ingest_replay_failures_total":    "counter",
	"kvrouter_ingest_replays_total":            "counter",
	"kvrouter_active_requests":                 "gauge",
	"kvrouter_prefill_tokens_per_second":       "gauge",
	"kvrouter_rank_cached_blocks":              "gauge",
	"kvrouter_route_load_imbalance":            "gauge",
}

// All is every metric family a router registers, typed: its components'
// collectors, built on a recording registry as the App builds them (a
// vector shows in a scrape only once it has a series, so they are read
// from the collectors' descriptions), and what an App's own registry
// gathers from the start (the Go and process collectors among them).
func All(t testing.TB) []docgen.Metric {
	t.Helper()
	rec := &recorder{Registerer: prometheus.NewRegistry()}
	idx := radix.New(radix.Config{})
	router, err := scoring.New(scoring.Config{Index: idx, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ingest.New(ingest.Config{Index: idx, BlockSize: 16, Registerer: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	srv, err := server.New(server.Config{Registerer: rec, Router: router, Ingest: m, Index: idx})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.SetText(server.TextConfig{BlockSize: 16}); err != nil { // the tokenization metrics
		t.Fatal(err)
	}
	if _, err := epp.New(epp.Config{Router: idleRouter{}, Fleet: idleRouter{}, Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	if _, err := discovery.NewMetrics(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := server.NewAuth(server.AuthConfig{Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	st, err := persist.Open(persist.Config{Dir: t.TempDir(), Registerer: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ns := natstest.Start(t)
	node, err := cluster.Connect(cluster.Config{URL: ns.URL(), ReplicaID: "r1", Registerer: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	rec.MustRegister(status.NewCollector(status.SourceFunc(func() []status.Rank { return nil })))

	described, err := docgen.Describe(rec.collectors)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]docgen.Metric{}
	for _, m := range append(described, appMetrics(t)...) {
		if prev, ok := byName[m.Name]; ok && prev.Type != "" {
			continue
		}
		byName[m.Name] = m
	}
	out := make([]docgen.Metric, 0, len(byName))
	for _, m := range byName {
		if m.Type == "" {
			m.Type = customTypes[m.Name]
			if m.Type == "" {
				t.Errorf("%s: no type (its collector is not a vector and collects no series of it): add it to customTypes", m.Name)
			}
		} else if _, ok := customTypes[m.Name]; ok {
			t.Errorf("%s is typed by its collector now: remove it from customTypes", m.Name)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// idleRouter is the endpoint picker's router and fleet, never called:
// the picker is built only for the metrics it registers.
type idleRouter struct{}

func (idleRouter) Ready() bool { return false }
func (idleRouter) Route(context.Context, *kvrouterv1.RouteRequest) (*kvrouterv1.RouteResponse, error) {
	return nil, errors.New("idle")
}
func (idleRouter) MarkPrefillDone(context.Context, *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	return nil, errors.New("idle")
}
func (idleRouter) MarkFinished(context.Context, *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	return nil, errors.New("idle")
}
func (idleRouter) Worker(string) *kvrouterv1.Worker { return nil }
func (idleRouter) Workers() []*kvrouterv1.Worker    { return nil }

// appMetrics builds an App, as cmd/router does (without running it), and
// returns the families its registry gathers.
func appMetrics(t testing.TB) []docgen.Metric {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.Persist.StateDir = t.TempDir()
	cfg.LogOutput = io.Discard
	for _, l := range []*net.Listener{&cfg.GRPCListener, &cfg.HTTPListener} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		*l = lis
	}
	a, err := app.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	mfs, err := a.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []docgen.Metric
	for _, mf := range mfs {
		m := docgen.Metric{Name: mf.GetName(), Help: mf.GetHelp(), Type: strings.ToLower(mf.GetType().String())}
		if mf.GetType() == dto.MetricType_UNTYPED {
			m.Type = "untyped"
		}
		if len(mf.GetMetric()) > 0 {
			for _, lp := range mf.GetMetric()[0].GetLabel() {
				m.Labels = append(m.Labels, lp.GetName())
			}
		}
		out = append(out, m)
	}
	return out
}

// recorder is a Registerer that registers with a real registry and keeps
// what was registered.
type recorder struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
