package ingest

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// sink applies one rank's batches in order. One goroutine uses it at a time.
type sink interface {
	// apply decodes one batch and applies it to the index, accumulating
	// counts into st. An error means nothing of the batch was applied: it
	// could not be decoded at all, or (errRefused) it was refused for what
	// it says.
	apply(payload []byte, st *batchStats) error
	// reset drops everything the rank holds in the index and forgets the
	// decoder's learned state.
	reset()
	// cached reports the number of blocks the rank holds in the index.
	cached() uint64
	// otherRanks returns the dp ranks besides its own that batches named
	// (the index ranks it also writes to, which reset clears too).
	otherRanks() []uint32
	// adopt makes dp ranks the sink's others (those of a restored worker).
	adopt(others []uint32)
}

// indexSink decodes a rank's batches with its own normalizer and applies the
// normalized events to the index.
type indexSink struct {
	idx  *radix.Index
	w    kv.WorkerRank
	norm *normalize.Normalizer
	b    normalize.Batch
	// others are ranks a batch named instead of w (the batch's rank is
	// trusted); reset clears them too.
	others []uint32
	// claims: w's stores since it became inexact (capacity.go).
	claims claimLog
}

// errRefused: a batch that decodes but names a dp rank no engine has.
var errRefused = errors.New("batch refused")

func newIndexSink(idx *radix.Index, w kv.WorkerRank, blockSize, maxEvents int, log *slog.Logger) *indexSink {
	return &indexSink{
		idx:  idx,
		w:    w,
		norm: normalize.New(normalize.Config{BlockSize: blockSize, Logger: log, MaxEvents: maxEvents}),
	}
}

func (s *indexSink) apply(payload []byte, st *batchStats) error {
	if err := s.norm.Normalize(payload, &s.b); err != nil {
		return err
	}
	b := &s.b
	if b.DPRank >= kv.MaxDPSize {
		// No engine has this rank: applying it would create a phantom
		// worker rank in the index (one per garbage value).
		return fmt.Errorf("%w: dp rank %d out of range [0, %d)", errRefused, b.DPRank, kv.MaxDPSize)
	}
	st.ts = b.TS
	for i, n := range b.Skipped {
		st.filtered[i] += n
	}
	if len(b.Errors) > 0 {
		st.decodeErrors += len(b.Errors)
		st.firstErr = b.Errors[0]
	}
	w := s.w
	if b.DPRank >= 0 && uint32(b.DPRank) != w.DPRank {
		st.dpMismatch = true
		w.DPRank = uint32(b.DPRank)
		s.noteOther(w.DPRank)
	}
	for i := range b.Events {
		ev := &b.Events[i]
		var err error
		switch ev.Kind {
		case normalize.KindStore:
			err = s.idx.Store(w, ev.Parent, ev.HasParent, ev.Tier, ev.Blocks)
			if ev.HasParent && ev.Parent == 0 && errors.Is(err, radix.ErrParentNotFound) {
				// Publishers built on llm-d's event code send parent 0
				// for "no parent": unless the rank holds a block whose
				// engine hash is 0, that is what it means.
				err = s.idx.Store(w, 0, false, ev.Tier, ev.Blocks)
				st.parentZero++
			}
			if err == nil {
				st.blocksStored += uint64(len(ev.Blocks))
				if s.claims.on && w == s.w {
					s.claims.note(ev.Parent, ev.HasParent, ev.Blocks)
				}
			}
		case normalize.KindStoreTier:
			err = s.idx.StoreTier(w, ev.EngineHashes, ev.Tier)
		case normalize.KindRemove:
			err = s.idx.Remove(w, ev.EngineHashes, ev.Tier)
			if err == nil || errors.Is(err, radix.ErrBlockNotFound) {
				st.blocksRemoved += uint64(len(ev.EngineHashes))
			}
		case normalize.KindClear:
			s.idx.Clear(w)
			st.cleared = st.cleared || w == s.w
		default:
			continue
		}
		st.events++
		if int(ev.Kind) < len(st.byKind) {
			st.byKind[ev.Kind]++
		}
		if err != nil {
			switch {
			case errors.Is(err, radix.ErrParentNotFound):
				st.applyErrors[applyParentNotFound]++
			case errors.Is(err, radix.ErrInvalid):
				st.applyErrors[applyInvalid]++
			case errors.Is(err, radix.ErrBlockNotFound):
				st.applyErrors[applyBlockNotFound]++
			default:
				st.applyErrors[applyOther]++
			}
		}
	}
	return nil
}

func (s *indexSink) otherRanks() []uint32 { return append([]uint32(nil), s.others...) }

func (s *indexSink) adopt(others []uint32) {
	for _, dp := range others {
		if dp != s.w.DPRank && dp < kv.MaxDPSize {
			s.noteOther(dp)
		}
	}
}

func (s *indexSink) noteOther(dp uint32) {
	for _, o := range s.others {
		if o == dp {
			return
		}
	}
	s.others = append(s.others, dp)
}

func (s *indexSink) reset() {
	s.idx.Clear(s.w)
	for _, dp := range s.others {
		s.idx.Clear(kv.WorkerRank{ID: s.w.ID, DPRank: dp})
	}
	s.others = s.others[:0]
	s.norm.Reset()
}

func (s *indexSink) cached() uint64 { return s.idx.Cached(s.w) }
