package discovery

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
)

// Source finds workers. Run reports the whole set it finds, each time it
// changes, until ctx is done; a source that cannot look (an API or DNS
// error) logs it and reports nothing, so its last set stands.
type Source interface {
	Name() string
	Run(ctx context.Context, report func([]*kvrouterv1.Worker)) error
}

// Registry is the fleet as the syncer sees it: the registrar that changes
// it and the list of its registrations.
type Registry interface {
	fleet.Registrar
	List(model string) []fleet.Registration
}

// SyncConfig configures a Syncer.
type SyncConfig struct {
	// Registry is changed by the syncer; required.
	Registry Registry
	// Sources are the names of the sources that report to the syncer:
	// no worker is removed until each reported once.
	Sources []string
	// RetryInterval is how soon a sync that failed is tried again
	// (default 10s).
	RetryInterval time.Duration
	// Logger receives each change and each refusal; nil discards.
	Logger *slog.Logger
	// OnSync, when set, is told each sync's result (tests wait on it).
	OnSync func(Result)
	// Metrics count the registry's refusals; nil counts nothing.
	Metrics *Metrics
}

// Result is what one sync did.
type Result struct {
	Upserted []string // registered or replaced
	Removed  []string // unregistered
	// Outranked are ids registered by the config file or the API, which
	// discovery leaves alone.
	Outranked []string
	// Errors are the registry's refusals, each naming its worker; the
	// sync is tried again after RetryInterval.
	Errors []error
	// Complete: every source reported, so absent workers were removed.
	Complete bool
}

// Syncer merges its sources' reports and applies them to the registry.
type Syncer struct {
	cfg  SyncConfig
	log  *slog.Logger
	kick chan struct{}

	mu      sync.Mutex
	reports map[string]map[string]*kvrouterv1.Worker // by source, then id
}

// NewSyncer returns a Syncer for cfg.
func NewSyncer(cfg SyncConfig) (*Syncer, error) {
	if cfg.Registry == nil {
		return nil, errors.New("discovery: SyncConfig.Registry is required")
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Syncer{cfg: cfg, log: log, kick: make(chan struct{}, 1),
		reports: make(map[string]map[string]*kvrouterv1.Worker)}, nil
}

// Report replaces source's set of workers and wakes Run.
func (s *Syncer) Report(source string, workers []*kvrouterv1.Worker) {
	set := make(map[string]*kvrouterv1.Worker, len(workers))
	for _, w := range workers {
		if _, dup := set[w.WorkerId]; dup {
			s.log.Warn("discovery: two workers with one id; the first is kept", "source", source, "worker", w.WorkerId)
			continue
		}
		set[w.WorkerId] = w
	}
	s.mu.Lock()
	s.reports[source] = set
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run syncs after each report, and again after RetryInterval while a sync
// fails, until ctx is done.
func (s *Syncer) Run(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-retry.C:
		}
		if r := s.Sync(ctx); len(r.Errors) > 0 {
			retry.Reset(s.cfg.RetryInterval)
		}
	}
}

// Sync applies the reports to the registry once.
func (s *Syncer) Sync(ctx context.Context) Result {
	desired, complete := s.desired()
	registered := map[string]*kvrouterv1.Worker{}
	for _, r := range s.cfg.Registry.List("") {
		if r.Source == fleet.SourceDiscovery {
			registered[r.Worker.WorkerId] = r.Worker
		}
	}
	ch := Diff(desired, registered, complete)
	res := Result{Complete: complete}
	for _, w := range ch.Upsert {
		err := s.cfg.Registry.Upsert(ctx, w, string(fleet.SourceDiscovery))
		switch {
		case err == nil:
			res.Upserted = append(res.Upserted, w.WorkerId)
			s.log.Info("discovery: worker registered", "worker", w.WorkerId, "endpoint", w.Endpoint, "model", w.Model)
		case errors.Is(err, fleet.ErrOutranked):
			res.Outranked = append(res.Outranked, w.WorkerId)
		default:
			res.Errors = append(res.Errors, err)
			s.log.Warn("discovery: worker not registered", "worker", w.WorkerId, "err", err)
		}
	}
	for _, id := range ch.Remove {
		err := s.cfg.Registry.Remove(ctx, id, string(fleet.SourceDiscovery))
		switch {
		case err == nil, errors.Is(err, fleet.ErrNotFound): // another replica removed it first
			res.Removed = append(res.Removed, id)
			s.log.Info("discovery: worker unregistered", "worker", id)
		case errors.Is(err, fleet.ErrOutranked):
			res.Outranked = append(res.Outranked, id)
		default:
			res.Errors = append(res.Errors, err)
			s.log.Warn("discovery: worker not unregistered", "worker", id, "err", err)
		}
	}
	s.cfg.Metrics.refusals(len(res.Errors))
	if s.cfg.OnSync != nil {
		s.cfg.OnSync(res)
	}
	return res
}

// desired merges the sources' reports (a worker id two sources report is
// the first source's by name) and says whether every source reported.
func (s *Syncer) desired() (map[string]*kvrouterv1.Worker, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.reports))
	for n := range s.reports {
		names = append(names, n)
	}
	sort.Strings(names)
	out := map[string]*kvrouterv1.Worker{}
	for _, n := range names {
		for id, w := range s.reports[n] {
			if _, ok := out[id]; !ok {
				out[id] = w
			}
		}
	}
	complete := true
	for _, n := range s.cfg.Sources {
		if _, ok := s.reports[n]; !ok {
			complete = false
		}
	}
	return out, complete
}
