package normalize

import "fmt"

// Reason is why an event was skipped; its String is the metric label.
type Reason uint8

// Skip reasons.
const (
	// reasonIgnoredEvent: the event carries nothing to apply (no blocks).
	reasonIgnoredEvent Reason = iota
	// reasonUnknownKind: kv_cache_spec_kind (sent or learned) is not one this package knows.
	reasonUnknownKind
	// reasonNonMainAttentionKind: the event names a non-main attention kind.
	reasonNonMainAttentionKind
	// reasonNonMainAttentionGroup: the event's group was learned to be non-main attention.
	reasonNonMainAttentionGroup
	// reasonUnlearnedGroup: a non-zero group index whose kind was never learned.
	reasonUnlearnedGroup
	// reasonAmbiguousCacheNamespace: the parent's cache namespace is ambiguous.
	reasonAmbiguousCacheNamespace
	// reasonRemoteLocality: the blocks are not on this worker.
	reasonRemoteLocality
	// reasonBlockSizeMismatch: the engine block size is not a multiple of the router's.
	reasonBlockSizeMismatch
	// reasonInvalidBlockSequence: a store repeats a block hash or names its own parent.
	reasonInvalidBlockSequence
	// reasonUnknownTag: the event tag is not BlockStored, BlockRemoved or AllBlocksCleared.
	reasonUnknownTag
	// reasonMalformedEvent: wrong field types or token count; see Batch.Errors.
	reasonMalformedEvent
	// NumReasons is the number of reasons.
	NumReasons
)

var reasonLabels = [NumReasons]string{
	"ignored_event", "unknown_kind", "non_main_attention_kind", "non_main_attention_group",
	"unlearned_group", "ambiguous_cache_namespace", "remote_locality", "block_size_mismatch",
	"invalid_block_sequence", "unknown_tag", "malformed_event",
}

// String returns the reason's metric label.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonLabels[r]
	}
	return fmt.Sprintf("Reason(%d)", r)
}
