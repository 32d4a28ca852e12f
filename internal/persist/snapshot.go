package persist

import (
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/state"
)

// Checkpointer cuts each rank's event stream for a snapshot: for one rank
// at a time it holds the rank's events between two batches and calls fn
// with the rank's position and the index worker/ranks it writes to.
// *ingest.Manager is one.
type Checkpointer interface {
	Checkpoint(fn func(rank kv.WorkerRank, pos ingest.Position, indexRanks []kv.WorkerRank) error) error
}

// Snapshot writes a snapshot of ix, rank by rank as cp cuts them, at most
// Config.SnapshotCPU of a core, and keeps it and the one before. A failed
// write (a full disk, say) leaves the snapshots there were; it is counted
// and returned, and routing goes on.
func (s *Store) Snapshot(ix *radix.Index, cp Checkpointer) (state.SnapshotInfo, error) {
	return s.snapshot(ix, cp, s.pace)
}

// SnapshotNow is Snapshot flat out, for shutdown, when nothing is left to
// route.
func (s *Store) SnapshotNow(ix *radix.Index, cp Checkpointer) (state.SnapshotInfo, error) {
	return s.snapshot(ix, cp, 0)
}

func (s *Store) snapshot(ix *radix.Index, cp Checkpointer, pace float64) (state.SnapshotInfo, error) {
	start := time.Now()
	g := ix.Geometry()
	info, err := s.snaps.Write(state.Geometry{Shards: g.Shards, SegmentBlocks: g.SegmentBlocks}, func(w *state.Writer) error {
		return writeRanks(w, ix, cp, pace)
	})
	if err != nil {
		s.metrics.writes.WithLabelValues("error").Inc()
		return info, fmt.Errorf("snapshot: %w", err)
	}
	took := time.Since(start)
	s.metrics.writes.WithLabelValues("ok").Inc()
	s.metrics.duration.Set(took.Seconds())
	s.metrics.bytes.Set(float64(info.Size))
	s.metrics.residencies.Set(float64(info.Counts.Bindings))
	s.metrics.lastSuccess.Set(float64(time.Now().Unix()))
	s.log.Debug("snapshot written", "file", info.Path, "bytes", info.Size, "ranks", info.Counts.Ranks,
		"residencies", info.Counts.Bindings, "took", took)
	return info, nil
}

// writeRanks writes every rank cp follows, each with its stream position,
// cut between two of its batches. The index worker/ranks a rank's batches
// named besides its own (its engine said another dp rank) are written after
// every rank's own cut, once each and without a position, unless they are a
// rank of their own: they are not cut with their writer, and ingest clears
// them with the worker's rank 0 when its restore is not exact.
//
// After each rank the writer rests pace times as long as the rank took
// (see Config.SnapshotCPU). Checkpoint hands over one rank after another, so
// the rest falls at the start of the next rank's turn: that rank's events
// wait a few milliseconds longer (queued, not lost) while routing gets the
// CPU.
func writeRanks(w *state.Writer, ix *radix.Index, cp Checkpointer, pace float64) error {
	exp := ix.NewExporter()
	var owed time.Duration
	rest := func(start time.Time) {
		if owed += time.Duration(float64(time.Since(start)) * pace); owed >= time.Millisecond {
			time.Sleep(owed)
			owed = 0
		}
	}
	own := make(map[kv.WorkerRank]bool)
	var others []kv.WorkerRank
	write := func(r kv.WorkerRank, st state.Stream) error {
		if err := w.BeginRank(r, st); err != nil {
			return err
		}
		if err := exp.Rank(r, w); err != nil {
			return err
		}
		return w.EndRank()
	}
	var last time.Time
	err := cp.Checkpoint(func(rank kv.WorkerRank, pos ingest.Position, indexRanks []kv.WorkerRank) error {
		if !last.IsZero() {
			rest(last)
		}
		last = time.Now()
		own[rank] = true
		for _, r := range indexRanks {
			if r != rank {
				others = append(others, r)
			}
		}
		return write(rank, state.Stream{HasSeq: pos.HasSeq, Seq: pos.Seq, Sum: pos.Sum, Epoch: pos.Epoch})
	})
	if err != nil {
		return err
	}
	for _, r := range others {
		if own[r] {
			continue
		}
		own[r] = true
		if err := write(r, state.Stream{}); err != nil {
			return err
		}
	}
	return nil
}
