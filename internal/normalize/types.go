package normalize

import "github.com/kvrouter/kvrouter/internal/kv"

// Kind is the kind of a normalized event.
type Kind uint8

// Normalized event kinds.
const (
	// KindStore attaches Blocks under Parent (or the root).
	KindStore Kind = iota + 1
	// KindStoreTier adds Tier to blocks the worker already holds, known only by
	// EngineHashes (for example vLLM's CPU offload stores, which carry no tokens).
	KindStoreTier
	// KindRemove removes EngineHashes from Tier.
	KindRemove
	// KindClear drops everything the worker/rank holds.
	KindClear
)

// Event is one normalized event for one worker/rank. Slices point into
// memory owned by the Batch that holds the event and are reused by the next
// decode into that Batch.
type Event struct {
	Kind         Kind
	Tier         kv.Tier
	HasParent    bool
	Parent       uint64
	Blocks       []kv.Block
	EngineHashes []uint64
}
