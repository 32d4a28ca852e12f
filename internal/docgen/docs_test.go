package docgen_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/app"
	"github.com/kvrouter/kvrouter/internal/cluster"
	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
	"github.com/kvrouter/kvrouter/internal/docgen"
	"github.com/kvrouter/kvrouter/internal/epp"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
	"github.com/kvrouter/kvrouter/internal/status"
)

var update = flag.Bool("update", false, "rewrite the generated sections of docs/ (go generate ./internal/docgen)")

const docsDir = "../../docs"

// machineDefaults are flag defaults that depend on where the flag set is
// built, as the documentation states them.
var machineDefaults = map[string]string{
	"replica-id": "<hostname>-<pid>",
	"state-dir":  "$XDG_STATE_HOME/kvrouter, else ~/.local/state/kvrouter",
}

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

// routerFlags is cmd/router's flag set: --config and --version (its own,
// which cmd/router's TestFlagSetIsApps checks) and the App's.
func routerFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("kvrouter", flag.ContinueOnError)
	fs.String("config", "", "YAML config file (flags override it)")
	fs.Bool("version", false, "print the version and exit")
	cfg := app.DefaultConfig()
	cfg.RegisterFlags(fs)
	return fs
}

// TestDocsGenerated: the flag table of docs/configuration.md and the metrics
// reference of docs/operations.md are what the code registers now.
func TestDocsGenerated(t *testing.T) {
	metrics := routerMetrics(t)
	check(t, "configuration.md", "flags", docgen.FlagTable(docgen.Flags(routerFlags(), machineDefaults)))
	check(t, "operations.md", "metrics", docgen.MetricTable(metrics))
}

func check(t *testing.T, file, section, want string) {
	t.Helper()
	path := filepath.Join(docsDir, file)
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		out, err := docgen.Splice(string(doc), section, want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := docgen.Section(string(doc), section)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("docs/%s's %s table differs from the code; run go generate ./internal/docgen\n%s",
			file, section, lineDiff(got, want))
	}
}

// lineDiff names the rows only one side has.
func lineDiff(got, want string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	g, w := in(got), in(want)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("code only: " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("docs only: " + l + "\n")
		}
	}
	return b.String()
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

// routerMetrics is every kvrouter_ metric family the router registers: its
// components' collectors, built on a recording registry as the App builds
// them (a vector shows in a scrape only once it has a series, so they are
// read from the collectors' descriptions), and what an App's own registry
// gathers from the start.
func routerMetrics(t *testing.T) []docgen.Metric {
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
		if !strings.HasPrefix(m.Name, "kvrouter_") {
			continue // Go's and the process's, documented as such
		}
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
	if len(out) < 40 {
		t.Fatalf("only %d kvrouter metrics found", len(out))
	}
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
func appMetrics(t *testing.T) []docgen.Metric {
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

// TestDocsDriftDetected: a flag or a metric the documents do not list, and
// a documented one the code no longer has, each make the tables differ.
func TestDocsDriftDetected(t *testing.T) {
	doc := func(file, section string) string {
		b, err := os.ReadFile(filepath.Join(docsDir, file))
		if err != nil {
			t.Fatal(err)
		}
		s, err := docgen.Section(string(b), section)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	flags := docgen.Flags(routerFlags(), machineDefaults)
	extra := append(append([]docgen.Flag(nil), flags...), docgen.Flag{Name: "undocumented", Usage: "new"})
	if docgen.FlagTable(extra) == doc("configuration.md", "flags") {
		t.Error("a flag added undocumented leaves the flag table equal")
	}
	if docgen.FlagTable(flags[1:]) == doc("configuration.md", "flags") {
		t.Error("a documented flag removed from the code leaves the flag table equal")
	}
	metrics := routerMetrics(t)
	more := append(append([]docgen.Metric(nil), metrics...), docgen.Metric{Name: "kvrouter_new_total", Type: "counter"})
	if docgen.MetricTable(more) == doc("operations.md", "metrics") {
		t.Error("a metric added undocumented leaves the metrics table equal")
	}
	if docgen.MetricTable(metrics[1:]) == doc("operations.md", "metrics") {
		t.Error("a documented metric gone from the code leaves the metrics table equal")
	}
}
