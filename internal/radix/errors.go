package radix

import "errors"

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
