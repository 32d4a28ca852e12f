package normalize

import (
	"context"
	"log/slog"
	"time"
)

// Config configures a Normalizer.
type Config struct {
	// BlockSize is the router block size in tokens; 0 means 16.
	BlockSize int
	// Logger receives rate-limited warnings; nil discards them.
	Logger *slog.Logger
	// MaxEvents bounds the events of one batch (0: DefaultMaxEvents). A
	// batch whose events array claims more is not decoded at all: Normalize
	// returns an error before decoding any event, so a small payload of
	// millions of empty events costs nothing.
	MaxEvents int
	// MaxErrors bounds the per-event errors one Batch keeps in Errors (0:
	// DefaultMaxErrors); the rest are only counted in Skipped.
	MaxErrors int
}

// Per-batch bounds (see Config). A decoded event costs a few hundred bytes
// of scratch memory whatever its size on the wire (an empty array is one
// byte), so the events of a batch are bounded by count, not only by the
// payload's size.
const (
	DefaultMaxEvents = 1 << 14
	DefaultMaxErrors = 16
)

const (
	// defaultMaxNamespacedBlocks bounds the remembered cache namespaces of
	// blocks. Blocks stored beyond it are not remembered (counted in
	// Batch.namespaceOverflow), so their unsalted children are not inherited.
	defaultMaxNamespacedBlocks = 1 << 18
	// defaultWarnInterval is the minimum time between two warnings of one kind.
	defaultWarnInterval = 10 * time.Second
)

// Warning kinds for rate limiting: one per Reason, then these.
const (
	warnNamespaceOverflow = int(NumReasons) + iota
	warnPagesOverflow
	numWarnings
)

// Normalizer holds one worker/rank's decode state (learned group kinds,
// namespaces of known blocks, engine block size). It is not safe for
// concurrent use: use one per (worker, rank).
type Normalizer struct {
	blockSize    int
	log          *slog.Logger
	warnInterval time.Duration
	maxNS        int
	maxEvents    int
	maxErrors    int

	groups          map[uint32]kindClass
	ns              map[uint64]nsState
	engineBlockSize int // learned from accepted stores; 0 until then
	pages           pageState

	seeds          seedCache
	mm             []uint64
	warnLast       [numWarnings]time.Time
	warnSuppressed [numWarnings]int
}

// New returns a Normalizer for one worker/rank.
func New(cfg Config) *Normalizer {
	n := &Normalizer{
		blockSize:    cfg.BlockSize,
		log:          cfg.Logger,
		warnInterval: defaultWarnInterval,
		maxNS:        defaultMaxNamespacedBlocks,
		maxEvents:    cfg.MaxEvents,
		maxErrors:    cfg.MaxErrors,
		groups:       make(map[uint32]kindClass),
		ns:           make(map[uint64]nsState),
		seeds:        newSeedCache(),
	}
	if n.blockSize <= 0 {
		n.blockSize = 16
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	if n.maxEvents <= 0 {
		n.maxEvents = DefaultMaxEvents
	}
	if n.maxErrors <= 0 {
		n.maxErrors = DefaultMaxErrors
	}
	return n
}

// Reset forgets learned per-worker state (group kinds, block namespaces, the
// engine block size), as when the worker/rank is cleared or restarted.
func (n *Normalizer) Reset() {
	clear(n.groups)
	clear(n.ns)
	n.pages.reset()
	n.engineBlockSize = 0
}

// Normalize decodes one ZMQ payload into b (reusing b's memory) and
// normalizes it. A payload that is not a batch at all (or has more than
// MaxEvents events) returns an error naming what was wrong and where, and b
// holds no events. Per-event problems (unknown tag, malformed event,
// filtered) skip that event only and are recorded in b (the first MaxErrors
// of them in b.Errors).
func (n *Normalizer) Normalize(payload []byte, b *Batch) error {
	b.reset()
	b.maxErrors = n.maxErrors
	b.raw.maxEvents = n.maxEvents
	if err := decodeBatch(payload, &b.raw); err != nil {
		return err
	}
	n.apply(&b.raw, b)
	return nil
}

// apply normalizes a decoded batch into b.
func (n *Normalizer) apply(rb *rawBatch, b *Batch) {
	b.TS, b.DPRank = rb.TS, rb.DPRank
	for i := range rb.Events {
		ev := &rb.Events[i]
		b.tags[ev.Tag]++
		if ev.Err != nil {
			b.skip(reasonMalformedEvent)
			b.keepError(ev.Err)
			continue
		}
		switch ev.Tag {
		case tagStored:
			b.engineBlocks += uint32(len(ev.BlockHashes))
			n.stored(ev, i, b)
		case tagRemoved:
			n.removed(ev, i, b)
		case tagCleared:
			clear(n.ns)
			n.pages.reset()
			b.Events = append(b.Events, Event{Kind: KindClear})
		default:
			b.skip(reasonUnknownTag)
		}
	}
}

// warn logs at most one warning of kind r (a Reason or a warn* constant) per
// warnInterval, reporting how many were suppressed in between.
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
