package normalize

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/kvrouter/kvrouter/internal/kv"
)

// Reason is why an event was skipped; its String is the metric label.
type Reason uint8

// Skip reasons.
const (
	// ReasonIgnoredEvent: the event carries nothing to apply (no blocks).
	ReasonIgnoredEvent Reason = iota
	// ReasonUnknownKind: kv_cache_spec_kind (sent or learned) is not one this package knows.
	ReasonUnknownKind
	// ReasonNonMainAttentionKind: the event names a non-main attention kind.
	ReasonNonMainAttentionKind
	// ReasonNonMainAttentionGroup: the event's group was learned to be non-main attention.
	ReasonNonMainAttentionGroup
	// ReasonUnlearnedGroup: a non-zero group index whose kind was never learned.
	ReasonUnlearnedGroup
	// ReasonAmbiguousCacheNamespace: the parent's cache namespace is ambiguous.
	ReasonAmbiguousCacheNamespace
	// ReasonRemoteLocality: the blocks are not on this worker.
	ReasonRemoteLocality
	// ReasonBlockSizeMismatch: the engine block size is not a multiple of the router's.
	ReasonBlockSizeMismatch
	// ReasonInvalidBlockSequence: a store repeats a block hash or names its own parent.
	ReasonInvalidBlockSequence
	// ReasonUnknownTag: the event tag is not BlockStored, BlockRemoved or AllBlocksCleared.
	ReasonUnknownTag
	// ReasonMalformedEvent: wrong field types or token count; see Batch.Errors.
	ReasonMalformedEvent
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

// Config configures a Normalizer.
type Config struct {
	// BlockSize is the router block size in tokens; 0 means 16.
	BlockSize int
	// Logger receives rate-limited warnings; nil discards them.
	Logger *slog.Logger
	// MaxNamespacedBlocks bounds the remembered cache namespaces of blocks;
	// 0 means 1<<18. Blocks stored beyond it are not remembered (counted in
	// Batch.NamespaceOverflow), so their unsalted children are not inherited.
	MaxNamespacedBlocks int
	// WarnInterval is the minimum time between two warnings of one reason;
	// 0 means 10s.
	WarnInterval time.Duration
}

// Warning kinds for rate limiting: one per Reason, then these.
const (
	warnNamespaceOverflow = int(NumReasons) + iota
	numWarnings
)

// maxGroups bounds the learned KV cache groups (the index comes off the wire).
const maxGroups = 1024

// maxExpandedHashes bounds the router hashes that tier-only stores and
// removes of one batch expand to when engine blocks are split: each engine
// hash becomes engine/router block size hashes, and a block size off the wire
// must not turn a few payload bytes into gigabytes.
const maxExpandedHashes = 1 << 20

// Normalizer holds one worker/rank's decode state (learned group kinds,
// namespaces of known blocks, engine block size). It is not safe for
// concurrent use: use one per (worker, rank).
type Normalizer struct {
	blockSize    int
	log          *slog.Logger
	warnInterval time.Duration
	maxNS        int

	groups          map[uint32]kindClass
	ns              map[uint64]nsState
	engineBlockSize int // learned from accepted stores; 0 until then

	emptyHash        uint64 // XXH64("")
	lastLoRA, lastNS uint64
	lastSeed         uint64
	mm               []uint64
	warnLast         [numWarnings]time.Time
	warnSuppressed   [numWarnings]int
}

// nsState is a block's cache namespace (by XXH64 of its name) or ambiguous.
type nsState struct {
	hash      uint64
	ambiguous bool
}

type kindClass uint8

const (
	kindMain kindClass = iota
	kindNonMain
	kindUnknown
)

var (
	mainKinds    = []string{"full_attention", "mla_attention", "sink_full_attention"}
	nonMainKinds = []string{"sliding_window", "sliding_window_mla", "mamba", "chunked_local_attention",
		"encoder_only_attention", "cross_attention"}
)

func classify(kind []byte) kindClass {
	for _, k := range mainKinds {
		if bytes.EqualFold(kind, []byte(k)) {
			return kindMain
		}
	}
	for _, k := range nonMainKinds {
		if bytes.EqualFold(kind, []byte(k)) {
			return kindNonMain
		}
	}
	return kindUnknown
}

// New returns a Normalizer for one worker/rank.
func New(cfg Config) *Normalizer {
	n := &Normalizer{
		blockSize:    cfg.BlockSize,
		log:          cfg.Logger,
		warnInterval: cfg.WarnInterval,
		maxNS:        cfg.MaxNamespacedBlocks,
		groups:       make(map[uint32]kindClass),
		ns:           make(map[uint64]nsState),
		emptyHash:    xxhash.Sum64(nil),
	}
	if n.blockSize <= 0 {
		n.blockSize = 16
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	if n.warnInterval <= 0 {
		n.warnInterval = 10 * time.Second
	}
	if n.maxNS <= 0 {
		n.maxNS = 1 << 18
	}
	n.lastLoRA, n.lastNS = n.emptyHash, n.emptyHash
	n.lastSeed = seedFromHashes(n.emptyHash, n.emptyHash)
	return n
}

// Reset forgets learned per-worker state (group kinds, block namespaces, the
// engine block size), as when the worker/rank is cleared or restarted.
func (n *Normalizer) Reset() {
	clear(n.groups)
	clear(n.ns)
	n.engineBlockSize = 0
}

// NamespacedBlocks returns how many block namespaces are remembered.
func (n *Normalizer) NamespacedBlocks() int { return len(n.ns) }

// Batch is one normalized payload. Its memory is reused by the next
// Normalize into it; Events' slices are valid until then.
type Batch struct {
	TS     float64
	DPRank int32 // -1 when absent
	Events []Event
	// Skipped counts skipped events by reason.
	Skipped [NumReasons]uint32
	// Errors holds one *EventError per malformed event.
	Errors []error
	// Tags counts decoded events by tag.
	Tags [NumTags]uint32
	// EngineBlocks counts block hashes in decoded BlockStored events.
	EngineBlocks uint32
	// Blocks counts router blocks in emitted KindStore events.
	Blocks uint32
	// NamespaceOverflow counts namespaced blocks not remembered (MaxNamespacedBlocks).
	NamespaceOverflow uint32

	raw    RawBatch
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
	b.Tags = [NumTags]uint32{}
	b.EngineBlocks, b.Blocks, b.NamespaceOverflow = 0, 0, 0
	b.blocks = b.blocks[:0]
	b.hashes = b.hashes[:0]
}

// Normalize decodes one ZMQ payload into b (reusing b's memory) and
// normalizes it. A payload that is not a batch at all returns a *DecodeError
// naming what was wrong and where, and b holds no events. Per-event problems
// (unknown tag, malformed event, filtered) skip that event only and are
// recorded in b.
func (n *Normalizer) Normalize(payload []byte, b *Batch) error {
	b.reset()
	if err := DecodeBatch(payload, &b.raw); err != nil {
		return err
	}
	n.apply(&b.raw, b)
	return nil
}

// apply normalizes a decoded batch into b.
func (n *Normalizer) apply(rb *RawBatch, b *Batch) {
	b.TS, b.DPRank = rb.TS, rb.DPRank
	for i := range rb.Events {
		ev := &rb.Events[i]
		b.Tags[ev.Tag]++
		if ev.Err != nil {
			b.skip(ReasonMalformedEvent)
			b.Errors = append(b.Errors, ev.Err)
			continue
		}
		switch ev.Tag {
		case TagStored:
			b.EngineBlocks += uint32(len(ev.BlockHashes))
			n.stored(ev, i, b)
		case TagRemoved:
			n.removed(ev, i, b)
		case TagCleared:
			clear(n.ns)
			b.Events = append(b.Events, Event{Kind: KindClear})
		default:
			b.skip(ReasonUnknownTag)
		}
	}
}

func (b *Batch) skip(r Reason) { b.Skipped[r]++ }

// filter returns the reason to drop an event by its group metadata, if any.
func (n *Normalizer) filter(ev *RawEvent) (Reason, bool) {
	if ev.HasKind {
		switch classify(ev.SpecKind) {
		case kindMain:
		case kindUnknown:
			return ReasonUnknownKind, true
		default:
			return ReasonNonMainAttentionKind, true
		}
	} else if ev.HasGroup {
		if c, ok := n.groups[ev.Group]; ok {
			switch c {
			case kindUnknown:
				return ReasonUnknownKind, true
			case kindNonMain:
				return ReasonNonMainAttentionGroup, true
			}
		} else if ev.Group != 0 {
			return ReasonUnlearnedGroup, true
		}
	}
	if bytes.EqualFold(ev.Locality, []byte("REMOTE")) {
		return ReasonRemoteLocality, true
	}
	return 0, false
}

func (n *Normalizer) learn(ev *RawEvent) {
	if !ev.HasGroup || !ev.HasKind {
		return
	}
	if _, ok := n.groups[ev.Group]; !ok && len(n.groups) >= maxGroups {
		n.warn(int(ReasonUnlearnedGroup), "too many KV cache groups; not learning", "group_idx", ev.Group)
		return
	}
	n.groups[ev.Group] = classify(ev.SpecKind)
}

// tierOf maps a storage medium to a tier.
func tierOf(m []byte) kv.Tier {
	switch {
	case len(m) == 0:
		return kv.TierDevice
	case eqAny(m, "GPU", "DEVICE"):
		return kv.TierDevice
	case eqAny(m, "CPU", "CPU_PINNED", "CPU_TIER1"):
		return kv.TierHost
	case eqAny(m, "CPU_TIER2", "DISK", "NVME", "STORAGE"):
		return kv.TierDisk
	case eqAny(m, "EXTERNAL", "NETWORK", "REMOTE", "SHARED"):
		return kv.TierExternal
	}
	return kv.TierDevice
}

func eqAny(m []byte, names ...string) bool {
	for _, s := range names {
		if bytes.EqualFold(m, []byte(s)) {
			return true
		}
	}
	return false
}

// splitFactor returns how many router blocks one engine block of bs tokens
// becomes, or false when bs is not a multiple of the router block size.
func (n *Normalizer) splitFactor(bs int) (int, bool) {
	if bs <= 0 {
		return 1, true
	}
	if bs%n.blockSize != 0 {
		return 0, false
	}
	return bs / n.blockSize, true
}

// appendExpanded appends the router engine hashes of engine blocks split k ways.
func appendExpanded(dst, hashes []uint64, k int) []uint64 {
	for _, h := range hashes {
		for i := 0; i < k-1; i++ {
			dst = append(dst, splitHash(h, i))
		}
		dst = append(dst, h)
	}
	return dst
}

func (n *Normalizer) stored(ev *RawEvent, idx int, b *Batch) {
	n.learn(ev)
	if r, drop := n.filter(ev); drop {
		b.skip(r)
		return
	}
	nb := len(ev.BlockHashes)
	if nb == 0 && len(ev.Tokens) == 0 {
		b.skip(ReasonIgnoredEvent)
		return
	}
	tier := tierOf(ev.Medium)
	if len(ev.Tokens) == 0 {
		// A tier-only store (vLLM's CPU offload): blocks known by engine hash.
		bs := int(ev.BlockSize)
		if bs <= 0 {
			bs = n.engineBlockSize
		}
		k, ok := n.splitFactor(bs)
		if !ok {
			n.mismatch(b, bs)
			return
		}
		if !n.expansionFits(b, ev, idx, k) {
			return
		}
		start := len(b.hashes)
		b.hashes = appendExpanded(b.hashes, ev.BlockHashes, k)
		b.Events = append(b.Events, Event{Kind: KindStoreTier, Tier: tier,
			EngineHashes: b.hashes[start:len(b.hashes):len(b.hashes)]})
		return
	}
	tokens := ev.Tokens
	bs := int(ev.BlockSize)
	if ev.Bigram && nb > 0 && (bs > 0 && len(tokens) == nb*bs+1 ||
		bs <= 0 && len(tokens)%nb != 0 && (len(tokens)-1)%nb == 0) {
		// One bigram per position (SGLang's EAGLE keys): the folded
		// tokens end with the next block's first token.
		tokens = tokens[:len(tokens)-1]
	}
	if bs <= 0 {
		if nb == 0 || len(tokens)%nb != 0 {
			n.malformed(b, ev, idx, fmt.Sprintf("%d tokens is not a multiple of %d blocks and block_size is absent", len(tokens), nb))
			return
		}
		bs = len(tokens) / nb
	}
	if len(tokens) != nb*bs {
		n.malformed(b, ev, idx, fmt.Sprintf("%d tokens, want %d blocks x %d", len(tokens), nb, bs))
		return
	}
	k, ok := n.splitFactor(bs)
	if !ok {
		n.mismatch(b, bs)
		return
	}
	if _, f := kv.CheckRun(ev.BlockHashes, identity, ev.Parent, ev.HasParent); f != kv.RunOK {
		b.skip(ReasonInvalidBlockSequence)
		return
	}

	// Cache namespace: explicit, or inherited from the parent on this worker.
	nsHash, hasNS := uint64(0), false
	if ns := eventNamespace(ev); len(ns) > 0 {
		nsHash, hasNS = xxhash.Sum64(ns), true
	} else if ev.HasParent {
		if st, ok := n.ns[ev.Parent]; ok {
			if st.ambiguous {
				b.skip(ReasonAmbiguousCacheNamespace)
				return
			}
			nsHash, hasNS = st.hash, true
		}
	}

	// All checks passed: from here on, state changes.
	n.engineBlockSize = bs
	for _, h := range ev.BlockHashes {
		st, known := n.ns[h]
		switch {
		case hasNS && !known:
			if len(n.ns) >= n.maxNS {
				b.NamespaceOverflow++
				n.warn(warnNamespaceOverflow, "cache namespace memory full; unsalted children of this block will not inherit its namespace",
					"max_namespaced_blocks", n.maxNS)
				continue
			}
			n.ns[h] = nsState{hash: nsHash}
		case known && !st.ambiguous && (!hasNS || st.hash != nsHash):
			n.ns[h] = nsState{ambiguous: true}
		}
	}

	loraHash := n.emptyHash
	if len(ev.LoRAName) > 0 {
		loraHash = xxhash.Sum64(ev.LoRAName)
	}
	if !hasNS {
		nsHash = n.emptyHash
	}
	if loraHash != n.lastLoRA || nsHash != n.lastNS {
		n.lastLoRA, n.lastNS = loraHash, nsHash
		n.lastSeed = seedFromHashes(loraHash, nsHash)
	}
	seed := n.lastSeed

	start := len(b.blocks)
	for j, h := range ev.BlockHashes {
		mm := n.blockMM(ev, j)
		toks := tokens[j*bs : (j+1)*bs]
		for i := 0; i < k; i++ {
			eh := h
			if i < k-1 {
				eh = splitHash(h, i)
			}
			b.blocks = append(b.blocks, kv.Block{EngineHash: eh,
				BlockHash: BlockHash(seed, toks[i*n.blockSize:(i+1)*n.blockSize], mm)})
		}
	}
	blocks := b.blocks[start:len(b.blocks):len(b.blocks)]
	b.Blocks += uint32(len(blocks))
	b.Events = append(b.Events, Event{Kind: KindStore, Tier: tier, HasParent: ev.HasParent,
		Parent: ev.Parent, Blocks: blocks})
}

// dynamoSaltPrefix marks cache salts set by Dynamo's frontend.
const dynamoSaltPrefix = "dynamo-cache-salt:"

// eventNamespace returns the event's own cache namespace: the cache_salt
// field, or else the first string of the first block's extra keys that is
// neither the LoRA name nor a multimodal hash.
func eventNamespace(ev *RawEvent) []byte {
	var ns []byte
	if ev.HasCacheSalt && len(ev.CacheSalt) > 0 {
		ns = ev.CacheSalt
	} else if len(ev.ExtraKeys) > 0 && ev.ExtraKeys[0].Present {
		for _, it := range ev.ExtraKeys[0].Items {
			if it.Kind != ExtraStr || bytes.Equal(it.Str, ev.LoRAName) {
				continue
			}
			if _, isMM := hexMMHash(it.Str); isMM {
				continue
			}
			ns = it.Str
			break
		}
	}
	return bytes.TrimPrefix(ns, []byte(dynamoSaltPrefix))
}

// blockMM returns the multimodal item hashes of engine block j, in order.
func (n *Normalizer) blockMM(ev *RawEvent, j int) []uint64 {
	n.mm = n.mm[:0]
	if j >= len(ev.ExtraKeys) || !ev.ExtraKeys[j].Present {
		return nil
	}
	for _, it := range ev.ExtraKeys[j].Items {
		switch it.Kind {
		case ExtraStr:
			if h, ok := hexMMHash(it.Str); ok {
				n.mm = append(n.mm, h)
			}
		case ExtraPair:
			n.mm = append(n.mm, mmHashBytes(it.Str))
		}
	}
	if len(n.mm) == 0 {
		return nil
	}
	return n.mm
}

func (n *Normalizer) removed(ev *RawEvent, idx int, b *Batch) {
	if r, drop := n.filter(ev); drop {
		b.skip(r)
		return
	}
	if len(ev.BlockHashes) == 0 {
		b.skip(ReasonIgnoredEvent)
		return
	}
	k, _ := n.splitFactor(n.engineBlockSize)
	if !n.expansionFits(b, ev, idx, k) {
		return
	}
	for _, h := range ev.BlockHashes {
		// An ambiguous hash stays ambiguous: another copy may remain.
		if st, ok := n.ns[h]; ok && !st.ambiguous {
			delete(n.ns, h)
		}
	}
	start := len(b.hashes)
	b.hashes = appendExpanded(b.hashes, ev.BlockHashes, k)
	b.Events = append(b.Events, Event{Kind: KindRemove, Tier: tierOf(ev.Medium),
		EngineHashes: b.hashes[start:len(b.hashes):len(b.hashes)]})
}

func (n *Normalizer) malformed(b *Batch, ev *RawEvent, idx int, msg string) {
	b.skip(ReasonMalformedEvent)
	b.Errors = append(b.Errors, &EventError{Index: idx, Tag: string(ev.Name), Field: "token_ids", Offset: -1, Msg: msg})
}

// expansionFits reports whether splitting ev's engine blocks k ways keeps the
// batch within maxExpandedHashes; if not, the event is skipped as malformed.
func (n *Normalizer) expansionFits(b *Batch, ev *RawEvent, idx int, k int) bool {
	if k <= 1 || len(b.hashes)+len(ev.BlockHashes)*k <= maxExpandedHashes {
		return true
	}
	b.skip(ReasonMalformedEvent)
	b.Errors = append(b.Errors, &EventError{Index: idx, Tag: string(ev.Name), Field: "block_size", Offset: -1,
		Msg: fmt.Sprintf("%d engine blocks split %d ways make %d router blocks, more than %d per batch",
			len(ev.BlockHashes), k, len(ev.BlockHashes)*k, maxExpandedHashes)})
	return false
}

func (n *Normalizer) mismatch(b *Batch, bs int) {
	b.skip(ReasonBlockSizeMismatch)
	n.warn(int(ReasonBlockSizeMismatch), "dropping store: engine block size is not a multiple of the router block size",
		"engine_block_size", bs, "router_block_size", n.blockSize)
}

// warn logs at most one warning of kind r (a Reason or a warn* constant) per
// WarnInterval, reporting how many were suppressed in between.
func (n *Normalizer) warn(r int, msg string, args ...any) {
	now := time.Now()
	if !n.warnLast[r].IsZero() && now.Sub(n.warnLast[r]) < n.warnInterval {
		n.warnSuppressed[r]++
		return
	}
	if !n.log.Enabled(context.Background(), slog.LevelWarn) {
		n.warnLast[r] = now
		return
	}
	if r < int(NumReasons) {
		args = append(args, "reason", Reason(r).String())
	}
	args = append(args, "suppressed", n.warnSuppressed[r])
	n.warnLast[r], n.warnSuppressed[r] = now, 0
	n.log.Warn(msg, args...)
}

func identity(h uint64) uint64 { return h }
