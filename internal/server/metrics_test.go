package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

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
