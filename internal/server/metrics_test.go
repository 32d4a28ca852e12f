package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// TestMetricsDiverted counts the guard's diversions and the blocks they
// cost, and nothing for a Route the guard left alone.
func TestMetricsDiverted(t *testing.T) {
	m, err := newMetrics(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.decision(&scoring.Decision{WorkerID: "a", Matched: 2, PromptBlocks: 10, Diverted: true, DivertedBlocks: 7})
	m.decision(&scoring.Decision{WorkerID: "b", Matched: 9, PromptBlocks: 10})
	m.decision(&scoring.Decision{WorkerID: "a", PromptBlocks: 10, Diverted: true}) // (the cheapest held no more than the pick)
	if got := testutil.ToFloat64(m.diverted); got != 2 {
		t.Errorf("diverted Routes: %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.divertedBlocks); got != 7 {
		t.Errorf("diverted blocks: %v, want 7", got)
	}
}

// TestRouteBusy: with every worker over its busy threshold a Route answers
// ResourceExhausted (not Unavailable, which a gateway takes for a replica it
// cannot reach), counted as kvrouter_rpc_rejected_total{reason="busy"};
// Routes before it are counted by why they chose, with their blocks.
func TestRouteBusy(t *testing.T) {
	e := newEnv(t, func(c *scoring.Config) { c.MaxActivePrefillTokens = 4 * blockSize })
	c := ctx(t)
	for _, id := range []string{"a", "b"} {
		if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: id, Model: "m"}}); err != nil {
			t.Fatal(err)
		}
	}
	toks := make([]uint32, 4*blockSize)
	for i, id := range []string{"r0", "r1"} {
		if _, err := e.router.Route(c, &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks}, RequestId: id}); err != nil {
			t.Fatalf("route %d: %v", i, err)
		}
	}
	_, err := e.router.Route(c, &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks}, RequestId: "r2"})
	wantCode(t, err, codes.ResourceExhausted, "busy thresholds")
	m := e.srv.metrics
	for _, tc := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"rejected{busy}", m.rejected.WithLabelValues(scoring.LimitBusy), 1},
		{"rejected{active_requests}", m.rejected.WithLabelValues(scoring.LimitActiveRequests), 0},
		// r0 had two equal candidates (load), r1 one (the other was busy).
		{"choices{load}", m.choices.WithLabelValues(scoring.ReasonLoad), 1},
		{"choices{single}", m.choices.WithLabelValues(scoring.ReasonSingle), 1},
		{"choices{cache}", m.choices.WithLabelValues(scoring.ReasonCache), 0},
		{"prompt blocks", m.promptBlocks, 8},
		{"matched blocks", m.matchedBlocks, 0},
		{"random matched blocks", m.randomMatched, 0},
	} {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Both ranks took a request of the same size: even, but for the
	// decay's weight on the later one (a window of 2 x (2 / (c-1))^2 Routes).
	if got := testutil.ToFloat64(m.imbalance); got <= 1 || got > 1.01 {
		t.Errorf("kvrouter_route_load_imbalance = %v, want just over 1", got)
	}
}
