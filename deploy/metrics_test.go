package deploy_test

import (
	"sort"
	"testing"

	"github.com/kvrouter/kvrouter/internal/docgen/metricset"
)

// pendingMetrics are names other changes in flight add to kvrouter, which
// the rules and the dashboard already use. PENDING: the lead reconciles this
// list at merge; a name here that kvrouter exports fails
// TestPendingMetricsStillPending, so the list empties itself.
var pendingMetrics = []string{}

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

// exportedMetrics is every series name a router exports: each family of
// metricset.All, a histogram as its _bucket, _sum and _count series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, m := range metricset.All(t) {
		switch m.Type {
		case "histogram":
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[m.Name+s] = true
			}
		case "summary":
			out[m.Name+"_sum"], out[m.Name+"_count"], out[m.Name] = true, true, true
		default:
			out[m.Name] = true
		}
	}
	if !out["kvrouter_build_info"] || len(out) < 20 {
		t.Fatalf("%d metric names registered, kvrouter_build_info among them %v: %v", len(out), out["kvrouter_build_info"], keys(out))
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
