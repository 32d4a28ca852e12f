package app

import (
	"fmt"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/state"
)

// openStore locks the state directory, unless persistence is off.
func (a *App) openStore() error {
	o := a.cfg.Persist
	if !o.Enabled() {
		a.log.Warn("persistence is off (state_dir: none): a restart loses the registry and the index")
		return nil
	}
	st, err := persist.Open(persist.Config{Dir: o.StateDir, Logger: a.log.With("component", "state"), Registerer: a.reg, SnapshotCPU: o.SnapshotCPU})
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	a.store = st
	a.AddCloser(func() { st.Close() })
	return nil
}

// registryStore keeps the fleet's registrations in the state directory's
// registry.
type registryStore struct{ reg *state.Registry }

func (r registryStore) Put(w *kvrouterv1.Worker, source fleet.Source) error {
	return r.reg.Put(state.Worker{
		WorkerID: w.WorkerId, Model: w.Model, Endpoint: w.Endpoint,
		KVEventsEndpoint: w.KvEventsEndpoint, ReplayEndpoint: w.ReplayEndpoint, Topic: w.Topic,
		DPSize: w.DpSize, BlockSize: w.BlockSize, Source: state.Source(source),
		CapacityTokens: w.CapacityTokens, RankKVEventsEndpoints: w.RankKvEventsEndpoints,
		RankReplayEndpoints: w.RankReplayEndpoints, RankEndpoints: w.RankEndpoints,
	})
}

func (r registryStore) Delete(id string) error {
	_, err := r.reg.Delete(id)
	return err
}

func protoWorker(w state.Worker) *kvrouterv1.Worker {
	return &kvrouterv1.Worker{
		WorkerId: w.WorkerID, Model: w.Model, Endpoint: w.Endpoint,
		KvEventsEndpoint: w.KVEventsEndpoint, ReplayEndpoint: w.ReplayEndpoint,
		DpSize: w.DPSize, BlockSize: w.BlockSize, Topic: w.Topic,
		CapacityTokens: w.CapacityTokens, RankKvEventsEndpoints: w.RankKVEventsEndpoints,
		RankReplayEndpoints: w.RankReplayEndpoints, RankEndpoints: w.RankEndpoints,
	}
}
