package main

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/server"
	"github.com/kvrouter/kvrouter/internal/state"
)

// openStore locks the state directory, or returns nil when persistence is
// off.
func openStore(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*persist.Store, error) {
	if cfg.StateDir == stateOff {
		log.Warn("persistence is off (state_dir: none): a restart loses the registry and the index")
		return nil, nil
	}
	st, err := persist.Open(persist.Config{Dir: cfg.StateDir, Logger: log.With("component", "state"), Registerer: reg, SnapshotCPU: cfg.SnapshotCPU})
	if err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return st, nil
}

// registryStore keeps the server's registrations in the state directory's
// registry.
type registryStore struct{ reg *state.Registry }

func (r registryStore) Put(w *kvrouterv1.Worker, source server.Source) error {
	return r.reg.Put(state.Worker{
		WorkerID: w.WorkerId, Model: w.Model, Endpoint: w.Endpoint,
		KVEventsEndpoint: w.KvEventsEndpoint, ReplayEndpoint: w.ReplayEndpoint, Topic: w.Topic,
		DPSize: w.DpSize, BlockSize: w.BlockSize, Source: state.Source(source),
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
	}
}

func configWorker(w WorkerConfig) *kvrouterv1.Worker {
	return &kvrouterv1.Worker{
		WorkerId: w.WorkerID, Model: w.Model, Endpoint: w.Endpoint,
		KvEventsEndpoint: w.KVEventsEndpoint, ReplayEndpoint: w.ReplayEndpoint,
		DpSize: w.DPSize, BlockSize: w.BlockSize, Topic: w.Topic,
	}
}

// registerWorkers registers the fleet at start: the workers the registry
// kept, then the config file's. The file is the operator's declaration of
// its own workers, so for a worker id it names the file wins over the
// registry, and a worker the registry kept from an earlier file that the
// file no longer names is dropped; a worker registered through the API stays
// until UnregisterWorker. A kept worker that no longer registers (say,
// validation got stricter) is logged and left out, not fatal; a file worker
// that does not register is an error, as it was without a state directory.
// It returns the ids registered.
func registerWorkers(srv *server.Server, file []WorkerConfig, st *persist.Store, log *slog.Logger) (map[string]bool, error) {
	registered := make(map[string]bool)
	named := make(map[string]bool, len(file))
	for _, w := range file {
		named[w.WorkerID] = true
	}
	if st != nil {
		for _, w := range st.Registry().Workers() {
			switch {
			case named[w.WorkerID]:
				continue
			case w.Source == state.SourceConfig:
				if _, err := st.Registry().Delete(w.WorkerID); err != nil {
					return nil, fmt.Errorf("registry: drop %q (no longer in the config file): %w", w.WorkerID, err)
				}
				log.Info("worker dropped: it came from the config file, which no longer names it", "worker", w.WorkerID)
				continue
			}
			if err := srv.Register(protoWorker(w), server.Source(w.Source), false); err != nil {
				log.Error("stored worker not registered", "worker", w.WorkerID, "err", err)
				continue
			}
			registered[w.WorkerID] = true
		}
	}
	for i, w := range file {
		if err := srv.Register(configWorker(w), server.SourceConfig, true); err != nil {
			return nil, fmt.Errorf("config: workers[%d]: %w", i, err)
		}
		registered[w.WorkerID] = true
	}
	return registered, nil
}
