package ingest

import "bytes"

// The restore rules: a rank restored from a snapshot holds the engine's
// blocks as of the restored seq N (digest S, topic epoch E). Its first
// connection asks the engine's buffer from N on (from what it holds, if a
// catch-up was abandoned part-way); the first reply decides:
//
//   - N with digest S (or N+1, the buffer's start): the engine continues
//     the snapshot's stream; what follows is applied (restored);
//   - above N+1: what the rank lacks is gone; keep the snapshot's blocks,
//     mark the rank inexact, apply the buffer (rebuilt);
//   - another digest at N, a seq below N, another epoch, or (at the end)
//     nothing from N on: the engine restarted; clear, ask for the new
//     incarnation's buffer from 0 (reset).
//
// Without a replay endpoint, or when the catch-up failed before any reply,
// the first live batch decides: kept when it is N+1 in the same epoch,
// rebuilt (inexact) when it is past N+1, else cleared (then applied). Each
// outcome is one restore-outcome action.

const whyEpoch = "topic epoch changed"

// restoreFrom takes a snapshot's position: the rank holds the engine's
// blocks as of batch in.seq (digest in.sum), of topic epoch in.epoch.
func (s *seqState) restoreFrom(in seqInput) {
	s.took(ruleRestore)
	s.held = seqHeld{ok: true, last: in.seq, sum: in.sum}
	s.epoch = nil
	if len(in.epoch) > 0 {
		s.epoch = append([]byte(nil), in.epoch...)
	}
	s.restoring, s.restoredSeq = true, in.seq
}

// epochDiffers reports whether a batch's topic epoch shows another engine
// incarnation than the one the rank follows (unknown on either side: no).
func (s *seqState) epochDiffers(ep []byte) bool {
	return ep != nil && s.epoch != nil && !bytes.Equal(ep, s.epoch)
}

// restoreReply checks the restore catch-up's first reply against the
// restored position and reports whether it handled the reply; if not, the
// reply rules go on (skipping the restored batch, applying N+1).
func (s *seqState) restoreReply(in seqInput) bool {
	h, rp := &s.held, &s.rp
	switch {
	case s.epochDiffers(in.epoch):
		s.took(ruleRestoreEpoch)
		rp.other, rp.otherWhy = true, whyEpoch
		s.epoch = append(s.epoch[:0], in.epoch...)
	case in.seq < h.last:
		s.took(ruleRestoreOther)
		rp.other, rp.otherWhy = true, "replay starts below the seq asked for"
	case in.seq == h.last && in.sum != h.sum:
		s.took(ruleRestoreOther)
		rp.other, rp.otherWhy = true, "replay buffer holds another batch at the restored seq"
	case in.seq > h.last+1:
		s.took(ruleRestoreStartsAbove)
		s.decide(outcomeRebuilt, "replay buffer starts above the restored seq + 1", in.seq, true)
		s.inexact(h.last + 1)
		s.emitApply(in.seq, in.sum)
	case in.seq == h.last:
		s.took(ruleRestoreVerified)
		rp.verified = true
		return false
	default:
		s.took(ruleRestoreContinues)
		return false
	}
	return true
}

// restoreDone ends the restore catch-up.
func (s *seqState) restoreDone(rp *replayRun, ok bool) {
	switch {
	case rp.other:
		s.took(ruleRestoreReset)
		s.restoreReset(rp.otherWhy, rp.maxSeen, true, rp.otherWhy == whyEpoch)
		return
	case ok && !rp.seen:
		s.took(ruleRestoreShort)
		s.restoreReset("replay buffer ends before the restored seq", 0, false, false)
		return
	case !s.restoring:
		s.took(pick(ok, ruleRestoreRebuiltDone, ruleRestoreRebuiltFailed))
	case rp.seen:
		s.took(pick(ok, ruleRestoreDone, ruleRestoreDonePartly))
		why := "replay buffer starts at the restored seq + 1"
		if rp.verified {
			why = "replay buffer holds the restored batch"
		}
		if !ok {
			why += "; the replay then failed"
		}
		s.decide(outcomeRestored, why, s.held.last, true)
	default:
		// Nothing shown: the first live batch decides, as without a replay.
		s.took(ruleRestoreFailed)
	}
	s.caughtUp(rp, ok)
}

// restoreReset clears a restored rank whose engine restarted and asks for the
// new incarnation's buffer. The restored epoch is forgotten unless a reply
// gave the new one (newEpoch): the new incarnation's live batches must not
// be taken for another restart.
func (s *seqState) restoreReset(why string, seq uint64, hasSeq, newEpoch bool) {
	s.clear()
	s.decide(outcomeReset, why, seq, hasSeq)
	if !newEpoch {
		s.epoch = nil
	}
	s.requestReplay(replayRebuild, 0)
}

// restoreLive decides a restore by the first live batch, when no catch-up
// did: kept when it follows the restored seq in the same epoch, kept but
// inexact when it is past it, cleared when it is at or below it (the engine
// restarted). The live rules then handle the batch.
func (s *seqState) restoreLive(in seqInput) {
	switch {
	case s.epochDiffers(in.epoch):
		s.took(ruleRestoreLiveEpoch)
		s.clear()
		s.decide(outcomeCleared, whyEpoch, in.seq, true)
	case in.seq <= s.held.last:
		s.took(ruleRestoreLiveCleared)
		s.clear()
		s.decide(outcomeCleared, "first live seq is not past the restored seq", in.seq, true)
	case in.seq > s.held.last+1:
		s.took(ruleRestoreLiveAbove)
		s.decide(outcomeRebuilt, "first live seq is past the restored seq + 1", in.seq, true)
		s.inexact(s.held.last + 1)
		s.skipTo(in.seq)
	default:
		s.took(ruleRestoreKept)
		s.decide(outcomeKept, "first live seq follows the restored seq", in.seq, true)
	}
}

// decide ends the restore with outcome o. It follows the actions that carry
// the outcome out: the status it publishes must not be seen before the index
// is what the outcome says.
func (s *seqState) decide(o restoreOutcome, why string, arg uint64, hasArg bool) {
	s.restoring = false
	s.emit(seqAction{kind: actOutcome, outcome: o, reason: why, seq: s.restoredSeq, arg: arg, hasArg: hasArg})
}
