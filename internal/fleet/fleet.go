package fleet

import (
	"errors"
	"log/slog"
	"sync"

	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// Config configures a Fleet.
type Config struct {
	// Router makes registered workers candidates; Ingest follows their
	// KV events. Both required.
	Router *scoring.Router
	Ingest *ingest.Manager
	// Store keeps registrations across restarts; nil keeps them in memory.
	Store Store
	// Logger receives registry changes; nil discards.
	Logger *slog.Logger
	// OnReject, when set, is told of a registration refused by a limit
	// (scoring.LimitWorkers, scoring.LimitDPSize).
	OnReject func(limit string)
	// OnChange, when set, is told the number of registered workers after
	// each change, under the registry's lock.
	OnChange func(n int)
	// OnForget, when set, is called after a worker is unregistered.
	OnForget func(id string)
}

// Registration is a registered worker and where it came from. Worker is
// the Fleet's: do not modify it.
type Registration struct {
	Worker *kvrouterv1.Worker
	Source Source
}

// Fleet is the registry of workers and the owner of their lifecycle.
type Fleet struct {
	router *scoring.Router
	ingest *ingest.Manager
	store  Store
	log    *slog.Logger
	cfg    Config

	// upsertMu makes Upsert's and Remove's check and change one step
	// with respect to each other.
	upsertMu sync.Mutex

	mu      sync.Mutex // serializes registry changes
	workers map[string]Registration
}

// New returns a Fleet for cfg.
func New(cfg Config) (*Fleet, error) {
	if cfg.Router == nil || cfg.Ingest == nil {
		return nil, errors.New("fleet: Config.Router and Config.Ingest are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fleet{router: cfg.Router, ingest: cfg.Ingest, store: cfg.Store, log: log, cfg: cfg,
		workers: make(map[string]Registration)}, nil
}

// put says whether and how register writes to the store.
type put int

const (
	putNone    put = iota // restored from the store, or applied from a shared one
	putCreate             // a new registration
	putReplace            // Upsert replacing a registration
)

// Register validates and adds a worker from source; with store, the
// registration is written to the store before Register returns (a worker
// restored from the store at start-up is registered without). The id must
// not be registered (ErrRegistered). The registry holds at most the
// router's MaxWorkers workers, each of at most kv.MaxDPSize ranks.
func (f *Fleet) Register(w *kvrouterv1.Worker, source Source, store bool) error {
	p := putNone
	if store {
		p = putCreate
	}
	return f.register(w, source, p)
}

func (f *Fleet) register(w *kvrouterv1.Worker, source Source, p put) error {
	if w != nil && w.DpSize > kv.MaxDPSize {
		f.reject(scoring.LimitDPSize) // validate's error names it
	}
	if err := Validate(w); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.workers[w.WorkerId]; ok {
		return errorf(ErrRegistered, nil, "worker.worker_id %q is already registered", w.WorkerId)
	}
	// Before follow: a registration past the limit starts no subscription.
	if limit := f.router.Limits().MaxWorkers; len(f.workers) >= limit {
		f.reject(scoring.LimitWorkers)
		return errorf(ErrFull, nil, "worker %q not registered: %d workers are registered, the limit (--max-workers)", w.WorkerId, len(f.workers))
	}
	if err := f.follow(w); err != nil {
		return err
	}
	stored := normalized(w)
	if err := f.persist(stored, source, p); err != nil {
		f.unfollow(w)
		return err
	}
	f.workers[w.WorkerId] = Registration{Worker: stored, Source: source}
	f.changed()
	f.log.Info("worker registered", "worker", w.WorkerId, "model", w.Model, "dp_size", stored.DpSize,
		"kv_events_endpoint", w.KvEventsEndpoint, "replay_endpoint", w.ReplayEndpoint, "source", source)
	return nil
}

// persist writes a registration to the store as p says.
func (f *Fleet) persist(w *kvrouterv1.Worker, source Source, p put) error {
	if p == putNone || f.store == nil {
		return nil
	}
	var err error
	if r, ok := f.store.(Replacer); ok && p == putReplace {
		err = r.Replace(w, source)
	} else {
		err = f.store.Put(w, source)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrRegistered):
		return errorf(ErrRegistered, err, "worker.worker_id: %v", err)
	}
	return errorf(ErrStore, err, "registry not saved, worker not registered: %v", err)
}

// follow starts a worker's event subscriptions and makes it a candidate.
func (f *Fleet) follow(w *kvrouterv1.Worker) error {
	dp := int(max(w.DpSize, 1))
	// Events first: a worker whose subscription cannot start is never a
	// candidate, not even for the Routes that would run before a rollback.
	if w.KvEventsEndpoint != "" {
		err := f.ingest.Add(ingest.Worker{
			ID: w.WorkerId, Model: w.Model, KVEndpoint: w.KvEventsEndpoint,
			ReplayEndpoint: w.ReplayEndpoint, Topic: w.Topic, DPSize: dp,
			CapacityTokens: w.CapacityTokens, RankKVEndpoints: w.RankKvEventsEndpoints,
			RankReplayEndpoints: w.RankReplayEndpoints,
		})
		if err != nil {
			kind := ErrInvalid
			if errors.Is(err, ingest.ErrRemoving) {
				kind = ErrRemoving
			}
			return errorf(kind, err, "worker.kv_events_endpoint: %v", err)
		}
	}
	if err := f.router.AddWorker(scoring.Worker{
		ID: w.WorkerId, Model: w.Model, Endpoint: w.Endpoint, DPSize: dp,
		RankEndpoints: w.RankEndpoints, Approximate: w.KvEventsEndpoint == "",
	}); err != nil {
		if w.KvEventsEndpoint != "" {
			if rerr := f.ingest.Remove(w.WorkerId); rerr != nil {
				f.log.Warn("rolling back a registration", "worker", w.WorkerId, "err", rerr)
			}
		}
		return err
	}
	return nil
}

// unfollow undoes follow: stops the subscriptions, drops blocks and load.
func (f *Fleet) unfollow(w *kvrouterv1.Worker) {
	if w.KvEventsEndpoint != "" {
		// Remove forgets the worker even when stopping its subscriptions
		// fails, so the router forgets it too: failing here would leave a
		// worker that no later Unregister could remove.
		if err := f.ingest.Remove(w.WorkerId); err != nil {
			f.log.Warn("stop following worker", "worker", w.WorkerId, "err", err)
		}
	}
	f.router.RemoveWorker(w.WorkerId)
}

// Unregister removes worker id, whatever its source; with store, from the
// store first: a removal the store could not save leaves the worker
// registered (ErrStore).
func (f *Fleet) Unregister(id string, store bool) error {
	f.mu.Lock()
	reg, ok := f.workers[id]
	if !ok {
		f.mu.Unlock()
		return errorf(ErrNotFound, nil, "worker_id %q is not registered", id)
	}
	if store && f.store != nil {
		if err := f.store.Delete(id); err != nil {
			f.mu.Unlock()
			return errorf(ErrStore, err, "registry not saved, worker still registered: %v", err)
		}
	}
	delete(f.workers, id)
	f.changed()
	f.mu.Unlock()
	// Stopping the subscriptions can wait for a stuck rank (up to ingest's
	// StopTimeout): not under the registry's lock, which every registry
	// call takes. A registration of the same id meanwhile is refused with
	// ErrRemoving until the stop is over.
	f.unfollow(reg.Worker)
	if f.cfg.OnForget != nil {
		f.cfg.OnForget(id)
	}
	f.log.Info("worker unregistered", "worker", id)
	return nil
}

// Registered returns a copy of the registration of worker id, if any.
func (f *Fleet) Registered(id string) (*kvrouterv1.Worker, Source, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reg, ok := f.workers[id]
	if !ok {
		return nil, "", false
	}
	return proto.CloneOf(reg.Worker), reg.Source, true
}

// List returns the registrations, in no order, the model's alone unless
// model is empty.
func (f *Fleet) List(model string) []Registration {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Registration, 0, len(f.workers))
	for _, r := range f.workers {
		if model == "" || r.Worker.Model == model {
			out = append(out, r)
		}
	}
	return out
}

func (f *Fleet) changed() {
	if f.cfg.OnChange != nil {
		f.cfg.OnChange(len(f.workers))
	}
}

func (f *Fleet) reject(limit string) {
	if f.cfg.OnReject != nil {
		f.cfg.OnReject(limit)
	}
}

// normalized is w as registered: dp_size 0 is 1.
func normalized(w *kvrouterv1.Worker) *kvrouterv1.Worker {
	c := &kvrouterv1.Worker{
		WorkerId: w.WorkerId, Model: w.Model, Endpoint: w.Endpoint,
		KvEventsEndpoint: w.KvEventsEndpoint, ReplayEndpoint: w.ReplayEndpoint,
		DpSize: max(w.DpSize, 1), BlockSize: w.BlockSize, Topic: w.Topic,
		CapacityTokens: w.CapacityTokens, RankKvEventsEndpoints: w.RankKvEventsEndpoints,
		RankReplayEndpoints: w.RankReplayEndpoints, RankEndpoints: w.RankEndpoints,
	}
	return c
}
