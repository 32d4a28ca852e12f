package app

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestWorkerConfigRankFields: a worker's capacity_tokens and per-rank
// endpoint lists in the YAML file reach the registration the fleet gets.
func TestWorkerConfigRankFields(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvrouter.yaml")
	if err := os.WriteFile(path, []byte(`workers:
  - worker_id: dp
    model: m
    kv_events_endpoint: tcp://a:5557
    replay_endpoint: tcp://a:6557
    dp_size: 2
    capacity_tokens: 262144
    rank_kv_events_endpoints: [tcp://a:5557, tcp://b:5558]
    rank_replay_endpoints: [tcp://a:6557, tcp://b:6558]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if err := cfg.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Workers) != 1 {
		t.Fatalf("%d workers read", len(cfg.Workers))
	}
	w := cfg.Workers[0].Proto()
	if w.GetCapacityTokens() != 262144 ||
		!slices.Equal(w.GetRankKvEventsEndpoints(), []string{"tcp://a:5557", "tcp://b:5558"}) ||
		!slices.Equal(w.GetRankReplayEndpoints(), []string{"tcp://a:6557", "tcp://b:6558"}) {
		t.Fatalf("registration %v: the rank fields did not come through", w)
	}
}
