package status

// Rank is one worker/rank as the router follows it.
type Rank struct {
	Worker string
	Model  string
	DPRank uint32
	// Connected reports a live connection to the engine's KV event
	// publisher.
	Connected bool
	// LastSeq is the last sequence number applied.
	LastSeq uint64
	// LagSeconds is the router's clock minus the engine's timestamp of the
	// last batch applied; negative when not known (nothing applied yet).
	LagSeconds float64
	// CachedBlocks is what the index holds for the rank, CapacityBlocks
	// the bound on what the rank can hold (0: not known).
	CachedBlocks, CapacityBlocks uint64
	// Inexact is set when the rank's index may differ from the engine's
	// cache (history was lost and its blocks were kept), from
	// InexactSinceSeq on.
	Inexact         bool
	InexactSinceSeq uint64
	// Problems are the reasons the rank's events are being refused or
	// skipped.
	Problems []Problem
	// Restore is what came of the rank's restore from a snapshot ("" when
	// none).
	Restore string
}

// Problem is one reason a rank's events are being refused or skipped.
type Problem struct {
	Reason string
	Count  uint64
	// Detail is the last refusal's message.
	Detail string
}

// Source lists the ranks of every registered worker, by worker and rank.
// It is called once per page and per metrics scrape, and must be safe for
// concurrent use.
type Source interface {
	Ranks() []Rank
}

// SourceFunc adapts a function to a Source.
type SourceFunc func() []Rank

// Ranks calls f.
func (f SourceFunc) Ranks() []Rank { return f() }
