package normalize

import (
	"unsafe"

	"github.com/kvrouter/kvrouter/internal/kv"
)

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
	// field and the byte offset: the first Config.MaxErrors of them
	// (Skipped counts them all).
	Errors []error

	tags              [numTags]uint32 // decoded events by tag
	engineBlocks      uint32          // block hashes in decoded BlockStored events
	routerBlocks      uint32          // router blocks in emitted KindStore events
	namespaceOverflow uint32          // namespaced blocks not remembered (maxNS)
	held              uint32          // events that emit nothing yet: pages of a router block in progress

	maxErrors int // Errors kept (0: all, for batches not filled by Normalize)

	raw    rawBatch
	blocks []kv.Block
	hashes []uint64
	// trims release scratch memory an outlier batch grew (see trim).
	trimEvents, trimBlocks, trimHashes trimmer
}

func (b *Batch) reset() {
	b.TS, b.DPRank = 0, -1
	clear(b.Events)
	b.Events = trim(b.Events, &b.trimEvents)
	b.Skipped = [NumReasons]uint32{}
	clear(b.Errors)
	b.Errors = b.Errors[:0]
	b.tags = [numTags]uint32{}
	b.engineBlocks, b.routerBlocks, b.namespaceOverflow, b.held = 0, 0, 0, 0
	b.blocks = trim(b.blocks, &b.trimBlocks)
	b.hashes = trim(b.hashes, &b.trimHashes)
}

// keepError records a malformed event's error, unless MaxErrors are kept.
func (b *Batch) keepError(err error) {
	if b.maxErrors <= 0 || len(b.Errors) < b.maxErrors {
		b.Errors = append(b.Errors, err)
	}
}

func (b *Batch) skip(r Reason) { b.Skipped[r]++ }

// skipMalformed skips event idx as malformed, with the error saying why.
func (b *Batch) skipMalformed(ev *rawEvent, idx int, f field, msg string) {
	b.skip(reasonMalformedEvent)
	if b.maxErrors <= 0 || len(b.Errors) < b.maxErrors {
		b.Errors = append(b.Errors, &eventError{index: idx, tag: string(ev.Name), field: fieldNames[f], offset: -1, msg: msg})
	}
}

// Scratch memory: a Batch reuses its slices from one payload to the next,
// so one outlier (a batch of a million blocks) would keep its memory for
// good. A slice of more than trimMinBytes whose capacity is over four times
// the most any batch used in the last trimWindow resets is dropped (the next
// batch grows a new one to its size).
const (
	trimWindow   = 16
	trimMinBytes = 1 << 20
)

// trimmer is one slice's use over the current window.
type trimmer struct {
	peak  int // the largest length at a reset in the window
	count int // resets in the window
}

// trim returns s emptied for reuse, or nil when it grew far beyond what the
// last trimWindow batches used. The caller clears references first.
func trim[T any](s []T, t *trimmer) []T {
	t.peak = max(t.peak, len(s))
	if t.count++; t.count < trimWindow {
		return s[:0]
	}
	peak := t.peak
	*t = trimmer{}
	if uint64(cap(s))*uint64(unsafe.Sizeof(*new(T))) > trimMinBytes && cap(s) > 4*peak {
		return nil
	}
	return s[:0]
}
