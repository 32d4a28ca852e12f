package persist

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/state"
)

// Restored is what Restore found.
type Restored struct {
	// Index is the restored index, or an empty one.
	Index *radix.Index
	// Positions are the restored ranks' stream positions: where each rank
	// asks its engine to replay from.
	Positions map[kv.WorkerRank]ingest.Position
	// Snapshot is the file loaded; Path "" when none was.
	Snapshot state.SnapshotInfo
	// Refused are the snapshot files found bad (moved aside) or unusable.
	Refused []state.Refusal
	Took    time.Duration
}

// Restore loads the newest valid snapshot into a new index of cfg. A bad
// file is refused by name (logged, moved aside) and the one before is
// tried; with none valid the index starts empty. A snapshot written for
// another index geometry (a changed --index-shards) cannot be used: it is
// logged and left in place, and the index starts empty. Only an I/O error
// on the directory itself is returned.
func (s *Store) Restore(cfg radix.Config) (Restored, error) {
	start := time.Now()
	var ld *loader
	loaded, err := s.snaps.Latest(func() state.Visitor {
		ld = &loader{cfg: cfg, pos: make(map[kv.WorkerRank]ingest.Position)}
		return ld
	})
	res := Restored{Refused: loaded.Refused}
	for _, r := range loaded.Refused {
		s.metrics.refused.WithLabelValues("snapshot").Inc()
		s.log.Error("snapshot refused", "file", r.Path, "reason", r.Err, "kept_as", r.MovedTo)
	}
	var geom *geometryError
	switch {
	case errors.As(err, &geom):
		s.log.Error("snapshot made for another index geometry; starting empty", "err", err)
	case err != nil:
		return res, err
	case loaded.Snapshot.Path != "":
		ix, ferr := ld.im.Finish()
		if ferr != nil { // the records passed their checks one by one; not as a whole
			s.metrics.refused.WithLabelValues("snapshot").Inc()
			s.log.Error("snapshot refused", "file", loaded.Snapshot.Path, "reason", ferr)
			break
		}
		res.Index, res.Positions, res.Snapshot = ix, ld.pos, loaded.Snapshot
	}
	if res.Index == nil {
		res.Index = radix.New(cfg)
		res.Positions = map[kv.WorkerRank]ingest.Position{}
	}
	res.Took = time.Since(start)
	s.metrics.restoreTime.Set(res.Took.Seconds())
	s.metrics.restoredRes.Set(float64(res.Snapshot.Counts.Bindings))
	if res.Snapshot.Path != "" {
		s.log.Info("index restored", "file", res.Snapshot.Path, "ranks", res.Snapshot.Counts.Ranks,
			"residencies", res.Snapshot.Counts.Bindings, "took", res.Took)
	}
	return res, nil
}

// geometryError: the snapshot is sound but for an index of another shape.
type geometryError struct{ err error }

func (e *geometryError) Error() string { return e.err.Error() }
func (e *geometryError) Unwrap() error { return e.err }

// loader builds an index from a snapshot's records. An index record that
// breaks the index's rules makes the file bad (state.ErrCorrupt), as a
// checksum failure would: it is refused and the previous one tried.
type loader struct {
	cfg radix.Config
	im  *radix.Importer
	pos map[kv.WorkerRank]ingest.Position
}

func (l *loader) Geometry(g state.Geometry) error {
	im, err := radix.NewImporter(l.cfg, radix.Geometry{Shards: g.Shards, SegmentBlocks: g.SegmentBlocks})
	if err != nil {
		return &geometryError{err}
	}
	l.im = im
	return nil
}

func (l *loader) BeginRank(w kv.WorkerRank, st state.Stream) error {
	if st.HasSeq || st.Epoch != "" {
		l.pos[w] = ingest.Position{HasSeq: st.HasSeq, Seq: st.Seq, Sum: st.Sum, Epoch: st.Epoch}
	}
	return bad(l.im.Rank(w))
}

func (l *loader) Node(ref, parent, shard uint32, key uint64, depth uint32) error {
	return bad(l.im.Node(ref, parent, shard, key, depth))
}

func (l *loader) Binding(engineHash uint64, ref uint32, copies [kv.NumTiers]uint8) error {
	return bad(l.im.Binding(engineHash, ref, copies))
}

func (l *loader) EndRank() error { return bad(l.im.EndRank()) }

func bad(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", state.ErrCorrupt, err)
}
