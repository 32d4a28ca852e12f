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

// Batch is one normalized payload. Its memory is reused by the next
// Normalize into it; Events' slices are valid until then.
type Batch struct {
	TS     float64
	DPRank int32 // -1 when absent
	Events []Event
	// Skipped counts skipped events by reason.
	Skipped [NumReasons]uint32
	// Errors holds one error per malformed event, naming the event, its
	// field and the byte offset.
	Errors []error

	tags              [numTags]uint32 // decoded events by tag
	engineBlocks      uint32          // block hashes in decoded BlockStored events
	routerBlocks      uint32          // router blocks in emitted KindStore events
	namespaceOverflow uint32          // namespaced blocks not remembered (maxNS)

	raw    rawBatch
	blocks []kv.Block
	hashes []uint64
}

func (b *Batch) reset() {
	b.TS, b.DPRank = 0, -1
	clear(b.Events)
	b.Events = b.Events[:0]
	b.Skipped = [NumReasons]uint32{}
	clear(b.Errors)
	b.Errors = b.Errors[:0]
	b.tags = [numTags]uint32{}
	b.engineBlocks, b.routerBlocks, b.namespaceOverflow = 0, 0, 0
	b.blocks = b.blocks[:0]
	b.hashes = b.hashes[:0]
}

func (b *Batch) skip(r Reason) { b.Skipped[r]++ }

// skipMalformed skips event idx as malformed, with the error saying why.
func (b *Batch) skipMalformed(ev *rawEvent, idx int, f field, msg string) {
	b.skip(reasonMalformedEvent)
	b.Errors = append(b.Errors, &eventError{index: idx, tag: string(ev.Name), field: fieldNames[f], offset: -1, msg: msg})
}
