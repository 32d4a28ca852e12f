package radix

import (
	"errors"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Score is one worker/rank's answer to a Match. It names the worker/rank by
// slot (Index.WorkerOf) rather than by Worker: a match writes one Score per
// worker holding the prompt's first block, a thousand on a large fleet, and
// without the name a Score is 32 bytes instead of 64.
type Score struct {
	// Slot is the worker/rank's dense number in this index: stable for the
	// index's life and never given to another worker/rank, so callers can keep
	// per-worker data in a slice indexed by it.
	Slot uint32
	// Matched is the number of leading prompt blocks the worker holds on any tier.
	Matched uint32
	// ByTier counts matched blocks by the best tier the worker holds them on.
	ByTier [kv.NumTiers]uint32
	// Cached is the number of blocks in the worker/rank's index.
	Cached uint64
}

// Errors returned by Store, StoreTier and Remove. A store that fails is dropped
// whole and leaves the worker's state as it was, except where said.
var (
	// ErrParentNotFound: the run's parent engine hash is unknown on this worker.
	ErrParentNotFound = errors.New("parent_not_found")
	// ErrInvalid: the run repeats an engine hash or names its own parent, or
	// its tier is out of range (dropped whole); or some of its blocks would be
	// the 256th engine hash of the worker on one prefix and tier (those
	// blocks are skipped, the rest applied).
	ErrInvalid = errors.New("invalid")
	// ErrBlockNotFound: some engine hashes were unknown on this worker (the rest were applied).
	ErrBlockNotFound = errors.New("block_not_found")
)
