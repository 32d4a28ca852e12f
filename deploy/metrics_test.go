package deploy_test

import (
	"regexp"
	"sort"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/cluster"
	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
	"github.com/kvrouter/kvrouter/internal/status"
)

// pendingMetrics are names other changes in flight add to kvrouter, which
// the rules and the dashboard already use. PENDING: the lead reconciles this
// list at merge; a name here that kvrouter exports fails
// TestPendingMetricsStillPending, so the list empties itself.
var pendingMetrics = []string{
	// Routing-decision metrics (scoring, server).
	"kvrouter_route_choices_total",               // {reason}: cache, load, guard, sampled, single
	"kvrouter_route_prompt_blocks_total",         //
	"kvrouter_route_matched_blocks_total",        //
	"kvrouter_route_random_matched_blocks_total", // round robin's expected matched blocks
	"kvrouter_route_load_imbalance",              // {model} gauge
	// Tokenizer.
	"kvrouter_tokenization_confirmed_total", // {model}
	"kvrouter_tokenization_mismatched_total",
	// Build.
	"kvrouter_build_info", // {version, goversion}
	// Ingest's per-rank state: names as assumed here, labels {worker, rank}.
	"kvrouter_ingest_rank_inexact",  // gauge 0/1
	"kvrouter_ingest_refused_total", // {reason}
}

// engineMetrics are the engines' own metrics the dashboard cites, as vLLM's
// Prometheus logger (vllm/v1/metrics/loggers.py) declares them; counters get
// _total from prometheus_client on the wire.
var engineMetrics = []string{
	"vllm:prefix_cache_queries_total", // tokens queried
	"vllm:prefix_cache_hits_total",    // tokens hit
	"vllm:kv_cache_usage_perc",        // gauge, 0..1
	"vllm:time_to_first_token_seconds_bucket",
}

// scrapeMetrics are the series Prometheus itself adds to every target.
var scrapeMetrics = []string{"up"}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// recorder is a Registerer that registers with a real registry and keeps
// what was registered.
type recorder struct {
	prometheus.Registerer
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.mu.Lock()
	r.collectors = append(r.collectors, c)
	r.mu.Unlock()
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// exportedMetrics builds the router's components on one registry, as
// cmd/router does, and returns every metric name they register: the series
// names a scrape can show (a histogram's _bucket, _sum and _count).
func exportedMetrics(t *testing.T) map[string]bool {
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
	// With a router and ingest the server starts, registering the index's
	// metrics too.
	if _, err := server.New(server.Config{Registerer: rec, Router: router, Ingest: m, Index: idx}); err != nil {
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

	out := map[string]bool{}
	for _, c := range rec.collectors {
		_, hist := c.(prometheus.Histogram)
		if _, ok := c.(*prometheus.HistogramVec); ok {
			hist = true
		}
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			sm := fqName.FindStringSubmatch(d.String())
			if sm == nil {
				t.Fatalf("cannot read the name of %s", d)
			}
			if hist {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					out[sm[1]+s] = true
				}
			} else {
				out[sm[1]] = true
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d metric names registered: %v", len(out), keys(out))
	}
	return out
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// knownMetrics is what a query may name: exported, pending, the engines'
// and the scrape's.
func knownMetrics(t *testing.T) (known map[string]bool, exported map[string]bool) {
	exported = exportedMetrics(t)
	known = map[string]bool{}
	for k := range exported {
		known[k] = true
	}
	for _, l := range [][]string{pendingMetrics, engineMetrics, scrapeMetrics} {
		for _, n := range l {
			known[n] = true
		}
	}
	return known, exported
}

// TestPendingMetricsStillPending fails once a pending name is exported: take
// it off the list.
func TestPendingMetricsStillPending(t *testing.T) {
	exported := exportedMetrics(t)
	for _, n := range pendingMetrics {
		if exported[n] {
			t.Errorf("%s is exported now: remove it from pendingMetrics", n)
		}
	}
}
