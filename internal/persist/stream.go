package persist

import (
	"fmt"
	"io"
	"time"

	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/state"
)

// Snapshots also travel outside the state directory (cluster mode keeps
// them in an object store): the same format, written to and read from a
// stream.

// WriteSnapshot writes a snapshot of ix, cut rank by rank by cp as
// Store.Snapshot does, to w, taking at most cpu of a core (see
// Config.SnapshotCPU; 0 means DefaultSnapshotCPU).
func WriteSnapshot(w io.Writer, ix *radix.Index, cp Checkpointer, cpu float64) (state.Counts, error) {
	if cpu <= 0 || cpu > 1 {
		cpu = DefaultSnapshotCPU
	}
	g := ix.Geometry()
	sw := state.NewWriter(w, state.Geometry{Shards: g.Shards, SegmentBlocks: g.SegmentBlocks})
	if err := writeRanks(sw, ix, cp, (1-cpu)/cpu); err != nil {
		return sw.Counts(), fmt.Errorf("snapshot: %w", err)
	}
	if err := sw.Close(); err != nil {
		return sw.Counts(), fmt.Errorf("snapshot: %w", err)
	}
	return sw.Counts(), nil
}

// ReadSnapshot builds an index of cfg from a snapshot read from r, checking
// it as Restore checks a file: a bad stream (corrupt, truncated, another
// version, records that break the index's rules, another index geometry)
// is an error and no index. On success Restored.Snapshot has the counts
// (its Path is "").
func ReadSnapshot(r io.Reader, cfg radix.Config) (Restored, error) {
	start := time.Now()
	ld := &loader{cfg: cfg, pos: make(map[kv.WorkerRank]ingest.Position)}
	counts, err := state.ReadSnapshot(r, ld)
	if err != nil {
		return Restored{}, fmt.Errorf("read snapshot: %w", err)
	}
	if ld.im == nil {
		return Restored{}, fmt.Errorf("read snapshot: %w: no geometry record", state.ErrCorrupt)
	}
	ix, err := ld.im.Finish()
	if err != nil {
		return Restored{}, fmt.Errorf("read snapshot: %w: %w", state.ErrCorrupt, err)
	}
	return Restored{Index: ix, Positions: ld.pos, Snapshot: state.SnapshotInfo{Counts: counts}, Took: time.Since(start)}, nil
}
