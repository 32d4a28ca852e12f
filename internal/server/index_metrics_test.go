package server

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// TestIndexMetrics checks that the index's size and refusals reach /metrics.
func TestIndexMetrics(t *testing.T) {
	idx := radix.New(radix.Config{CheckInvariants: true})
	reg := prometheus.NewRegistry()
	ing, err := ingest.New(ingest.Config{Index: idx, BlockSize: blockSize, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer ing.Close()
	rt, err := scoring.New(scoring.Config{Index: idx, BlockSize: blockSize, DisablePrediction: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Router: rt, Ingest: ing, Index: idx, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	w := kv.WorkerRank{ID: "w"}
	if err := idx.Store(w, 0, false, kv.TierDevice, []kv.Block{{EngineHash: 1, BlockHash: 11}, {EngineHash: 2, BlockHash: 12}}); err != nil {
		t.Fatal(err)
	}
	if err := idx.Store(w, 99, true, kv.TierDevice, []kv.Block{{EngineHash: 3, BlockHash: 13}}); !errors.Is(err, radix.ErrParentNotFound) {
		t.Fatalf("store under unknown parent: %v", err)
	}
	for name, want := range map[string]float64{
		"kvrouter_index_residencies":            2,
		"kvrouter_index_nodes":                  2,
		"kvrouter_index_parent_not_found_total": 1,
		"kvrouter_index_blocks_stored_total":    2,
	} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() == name {
				found = true
				if got := mf.GetMetric()[0]; got.GetGauge().GetValue()+got.GetCounter().GetValue() != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
		}
		if !found {
			t.Errorf("%s not exported", name)
		}
	}
}
