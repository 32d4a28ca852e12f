package persist

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/state"
)

// Config configures Open.
type Config struct {
	// Dir is the state directory; created if missing. Required.
	Dir string
	// Logger receives what was refused, restored and written; nil discards.
	Logger *slog.Logger
	// Registerer receives the snapshot metrics; nil registers none.
	Registerer prometheus.Registerer
	// SnapshotCPU is the share of one core a snapshot may take, in (0, 1]:
	// after exporting a rank that took d, the writer waits d*(1-f)/f before
	// the next, so routing keeps the CPU it needs on a small machine. 0
	// means DefaultSnapshotCPU; 1 writes flat out.
	SnapshotCPU float64

	writeHook state.WriteHook // tests: a full disk
}

// DefaultSnapshotCPU is the default Config.SnapshotCPU.
const DefaultSnapshotCPU = 0.25

// Store is an open state directory: its lock, its registry and its
// snapshots.
type Store struct {
	dir     *state.Dir
	reg     *state.Registry
	snaps   *state.Snapshots
	log     *slog.Logger
	metrics *metrics
	pace    float64 // wait per unit of export time: (1-f)/f
}

// Open locks the state directory and opens its registry. A second router on
// the same directory gets an error wrapping state.ErrLocked. A registry file
// that is bad is refused (logged, moved aside) and the valid records before
// the bad one are kept.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("persist: Config.Dir is required")
	}
	if cfg.SnapshotCPU == 0 {
		cfg.SnapshotCPU = DefaultSnapshotCPU
	}
	if !(cfg.SnapshotCPU > 0 && cfg.SnapshotCPU <= 1) {
		return nil, fmt.Errorf("persist: Config.SnapshotCPU %v: want a share in (0, 1]", cfg.SnapshotCPU)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	dir, err := state.OpenDir(state.DirConfig{Path: cfg.Dir, WriteHook: cfg.writeHook})
	if err != nil {
		return nil, err
	}
	reg, refused, err := state.OpenRegistry(state.RegistryConfig{Dir: dir})
	if err != nil {
		dir.Close()
		return nil, fmt.Errorf("persist: %w", err)
	}
	if refused != nil {
		m.refused.WithLabelValues("registry").Inc()
		log.Error("registry file refused; starting from its valid records", "file", refused.Path,
			"reason", refused.Err, "kept_as", refused.MovedTo, "workers_kept", len(reg.Workers()))
	}
	return &Store{
		dir:     dir,
		reg:     reg,
		snaps:   state.NewSnapshots(state.SnapshotsConfig{Dir: dir}),
		log:     log,
		metrics: m,
		pace:    (1 - cfg.SnapshotCPU) / cfg.SnapshotCPU,
	}, nil
}

// Registry is the durable registry: a Put or Delete that returned is on disk.
func (s *Store) Registry() *state.Registry { return s.reg }

// Path is the state directory.
func (s *Store) Path() string { return s.dir.Path() }

// Close closes the registry and releases the directory's lock.
func (s *Store) Close() error {
	return errors.Join(s.reg.Close(), s.dir.Close())
}
