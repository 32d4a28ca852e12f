package fleet

import (
	"slices"
	"testing"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// TestNormalizedKeepsRankFields: the registration as kept (and handed to
// ingest) has the worker's capacity and per-rank endpoints.
func TestNormalizedKeepsRankFields(t *testing.T) {
	w := normalized(&kvrouterv1.Worker{WorkerId: "w", Model: "m", KvEventsEndpoint: "tcp://a:1", DpSize: 2,
		CapacityTokens: 4096, RankKvEventsEndpoints: []string{"tcp://a:1", "tcp://b:2"},
		RankReplayEndpoints: []string{"tcp://a:3", "tcp://b:4"}, RankEndpoints: []string{"a:8000", "b:8000"}})
	if w.GetCapacityTokens() != 4096 || !slices.Equal(w.GetRankKvEventsEndpoints(), []string{"tcp://a:1", "tcp://b:2"}) ||
		!slices.Equal(w.GetRankReplayEndpoints(), []string{"tcp://a:3", "tcp://b:4"}) ||
		!slices.Equal(w.GetRankEndpoints(), []string{"a:8000", "b:8000"}) {
		t.Fatalf("normalized dropped fields: %v", w)
	}
}
