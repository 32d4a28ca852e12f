package ingest

import (
	"bytes"
	"fmt"
	"strings"
)

// seqState is one rank's sequence rules as a state machine that does no I/O:
// step takes one input (a connection came up, a live batch, a replay reply,
// the replay's end or failure) and appends what the rank must do (apply a
// batch, clear the rank, ask for a replay, count, log). The rank's shell
// (rank.go) owns the sockets and the clock, carries the actions out and feeds
// a replay's replies and end back in; testdata/seq/*.txt drive it directly.
//
// A replay the state machine asks for is in progress until its end, failure
// or abandonment is stepped in; meanwhile only its replies are expected. A
// live batch that started a replay waits in the state machine and is handled
// further once the replay is over.
//
// A rank restored from a snapshot steps a restore before anything else: it
// holds the snapshot's blocks as of the restored seq, and the first
// connection's catch-up from that seq (or, without a replay endpoint, the
// first live batch) decides the restore's outcome.
type seqState struct {
	// canReplay: the engine has a replay endpoint.
	canReplay bool
	// started: an input was stepped (a restore is the first input or none).
	started bool
	// restoring: a restore's outcome is not decided yet. The rank holds the
	// snapshot's blocks as of restoredSeq, and what a catch-up abandoned
	// part-way applied after it, up to held.last.
	restoring   bool
	restoredSeq uint64

	held seqHeld
	// prev is what the rank held before the last apply, and applied says
	// the last step's last action was that apply: a batch that does not
	// decode (undecodable, stepped right after) was never applied.
	prev    seqHeld
	applied bool
	conn    seqConn
	// epoch is the last SGLang sgl-kv-epoch seen in a topic (nil: none yet).
	epoch []byte

	rp      replayRun   // the replay in progress, if rp.purpose != replayNone
	pending pendingLive // the live batch waiting for rp, if pending.ok

	out []seqAction // the current step's actions
	// taken has bit r set once rule r was followed (tests check that the
	// scripts follow every rule).
	taken uint64
}

// seqHeld is what the rank holds since it was last cleared.
type seqHeld struct {
	ok   bool   // a batch was applied since the last clear
	last uint64 // the last seq applied
	sum  uint64 // XXH64 of its payload: another incarnation's batch differs
	// fromZero: a catch-up found the engine's buffer empty, so the engine's
	// next batch is seq 0 and a later first seq is a gap.
	fromZero bool
}

// seqConn is what the current connection has shown.
type seqConn struct {
	// covered: a replay on this connection applied up to coveredTo, so live
	// batches up to there are copies of what the rank holds.
	covered   bool
	coveredTo uint64
	// liveSeen: a live batch arrived on this connection, liveLast the last.
	liveSeen bool
	liveLast uint64
}

// covers reports whether live batch seq is the copy of one a replay on this
// connection already applied (a second copy of it is not).
func (c *seqConn) covers(seq uint64) bool {
	return c.covered && seq <= c.coveredTo && (!c.liveSeen || seq > c.liveLast)
}

// replayPurpose says why a replay was asked for, which decides what its end
// means.
type replayPurpose uint8

const (
	replayNone replayPurpose = iota
	// replayCatchUp: a new connection asks for the engine's whole buffer and
	// checks it against what the rank holds (same engine, or a new one).
	replayCatchUp
	// replayRebuild: after an engine restart, the new incarnation's buffer.
	replayRebuild
	// replayGap: the batches a live gap skipped.
	replayGap
	// replayRestore: a restored rank's first connection asks for the
	// buffer from the restored seq on, to check that the engine continues it.
	replayRestore
	// replayRedo: a live batch did not decode; the engine's copy of it (and
	// what follows) is asked for.
	replayRedo
	numReplayPurposes
)

var replayPurposeNames = [numReplayPurposes]string{"none", "catch-up", "rebuild", "gap", "restore", "redo"}

// replayRun is the progress of one replay.
type replayRun struct {
	purpose replayPurpose
	from    uint64 // the first seq asked for
	seen    bool   // a reply arrived; maxSeen is the last one's seq
	maxSeen uint64
	// other: the buffer's batch at the last applied seq is not the one
	// applied (another engine incarnation); nothing after it is applied.
	// otherWhy: what showed it, in a restore catch-up.
	other    bool
	otherWhy string
	// verified: a restore catch-up's first reply was the restored batch.
	verified bool
	// heldBefore and lastBefore are what the rank held when it asked.
	heldBefore bool
	lastBefore uint64
	// redoSum: a redo's batch digest (the batch counts as consumed if the
	// redo does not deliver it).
	redoSum uint64
}

// liveStage is where the live rules resume for a batch that waited for a
// replay.
type liveStage uint8

const (
	stageBackwards liveStage = iota // is the batch behind what the rank holds?
	stageGap                        // is it ahead of it?
	stageApply                      // apply it unless a replay already did
	numLiveStages
)

var liveStageNames = [numLiveStages]string{"backwards", "gap", "apply"}

// pendingLive is a live batch waiting for a replay.
type pendingLive struct {
	ok       bool
	seq, sum uint64
	next     liveStage
}

// seqInputKind is what happened. Another input is another kind; a replay it
// asks for gets its own replayPurpose, whose end decides what it means (as
// the restore's does).
type seqInputKind uint8

const (
	inConnect         seqInputKind = iota // a new connection to the publisher is up
	inLive                                // a batch from the live stream
	inReplayReply                         // one batch of the replay in progress
	inReplayEnd                           // the replay reached the engine's end marker
	inReplayFailed                        // the replay failed (error, timeout, or cut off)
	inReplayAbandoned                     // the rank stopped during the replay
	inRestore                             // the rank starts from a snapshot's position
	inUndecodable                         // the batch the last step applied (seq) did not decode
	numSeqInputs
)

var seqInputNames = [numSeqInputs]string{"connect", "live", "replay-reply", "replay-end", "replay-failed",
	"replay-abandoned", "restore", "undecodable"}

// replayOutcome reports whether k ends the replay in progress.
func replayOutcome(k seqInputKind) bool { return k >= inReplayEnd && k <= inReplayAbandoned }

// seqInput is one input. A batch is known by its seq and its payload's XXH64.
// A restore gives the last seq applied before the snapshot, its digest and
// the epoch then.
type seqInput struct {
	kind  seqInputKind
	seq   uint64 // inLive, inReplayReply, inRestore
	sum   uint64 // inLive, inReplayReply, inRestore
	epoch []byte // the topic's sgl-kv-epoch value (nil: the topic has none or is not known)
	// limited: inConnect within the catch-up window of an earlier full
	// catch-up (the shell owns the clock; Config.CatchUpInterval).
	limited bool
}

// seqActionKind is what the shell must do.
type seqActionKind uint8

const (
	actApply     seqActionKind = iota // apply the batch in hand (seq): the reply, or the live batch
	actClear                          // clear the rank in the index and reset its decoder
	actReplay                         // ask for the buffer from seq on (counted) and step its replies in
	actCutReplay                      // end the replay: reply seq does not follow arg
	actCount                          // add one to counter
	actLog                            // log note, with reason, seq and arg
	actOutcome                        // the restore's outcome is decided: status, counter and its log line
	actInexact                        // the rank keeps its blocks though batches from seq on were lost
	numSeqActions
)

var seqActionNames = [numSeqActions]string{"apply", "clear", "request-replay", "cut-replay", "count", "log",
	"restore-outcome", "inexact"}

// seqCounter is a counter an action adds to.
type seqCounter uint8

const (
	countGaps            seqCounter = iota // sequence gaps on the live stream
	countReplayFailures                    // lost history and failed replays
	countRestarts                          // engine restarts (LastSeq reads 0 until the next apply)
	countCatchUpsLimited                   // connections that did not catch up from seq 0 (catch-up window)
	numSeqCounters
)

var seqCounterNames = [numSeqCounters]string{"gaps", "replay-failures", "engine-restarts", "catch-ups-limited"}

// seqNote is a log line an action asks for.
type seqNote uint8

const (
	noteGapReplaying    seqNote = iota // a gap [seq, arg) is being replayed
	noteHistoryLost                    // batches [seq, arg) are gone: clearing and rebuilding
	noteGapNotRecovered                // the gap replay failed short of arg
	noteRestarted                      // the engine restarted: last applied seq, the seq that showed it
	noteReplayFailed                   // the replay failed (the shell adds its error)
	noteUndecodable                    // batch seq did not decode: replaying it
	numSeqNotes
)

// seqNotes are the notes' names, messages, and the names of their seq and
// arg fields.
var seqNotes = [numSeqNotes]struct {
	name, msg      string
	warn           bool
	seqKey, argKey string
}{
	noteGapReplaying:    {"gap-replaying", "kv events: gap, replaying", false, "from", "live"},
	noteHistoryLost:     {"history-lost", "kv events: history lost, keeping the worker rank's blocks (inexact)", true, "missing_from", "resumes_at"},
	noteGapNotRecovered: {"gap-not-recovered", "kv events: gap not recovered, keeping the worker rank's blocks (inexact)", true, "missing_from", "resumes_at"},
	noteRestarted:       {"engine-restarted", "kv events: engine restarted, clearing worker rank", true, "last_seq", "seq"},
	noteReplayFailed:    {"replay-failed", "kv events: replay failed", true, "", ""},
	noteUndecodable:     {"undecodable", "kv events: batch does not decode, replaying it", true, "seq", "live"},
}

// restoreOutcome is what became of a restored rank (RankStatus.Restore).
type restoreOutcome uint8

const (
	outcomeRestored restoreOutcome = iota // the engine continued the restored seq: nothing lost
	outcomeRebuilt                        // its history no longer reaches the restored seq + 1: blocks kept, inexact
	outcomeReset                          // it restarted meanwhile: cleared, following the new incarnation
	outcomeKept                           // no replay; the first live seq follows the restored one
	outcomeCleared                        // no replay (or it failed); the first live batch does not follow: cleared
	numRestoreOutcomes
)

// restoreOutcomes are the outcomes' names, log messages and levels, and the
// name of the seq their log line gives besides the restored one.
var restoreOutcomes = [numRestoreOutcomes]struct {
	name, msg string
	warn      bool
	argKey    string
}{
	outcomeRestored: {"restored", "kv events: restored from snapshot, nothing lost", false, "caught_up_to"},
	outcomeRebuilt:  {"rebuilt", "kv events: restore: history lost, keeping the snapshot's blocks (inexact)", true, "resumes_at"},
	outcomeReset:    {"reset", "kv events: restore: engine restarted, clearing worker rank", true, "seq"},
	outcomeKept:     {"kept", "kv events: restored from snapshot, kept", false, "live_seq"},
	outcomeCleared:  {"cleared", "kv events: restore: clearing worker rank", true, "live_seq"},
}

// seqAction is one thing to do.
type seqAction struct {
	kind    seqActionKind
	counter seqCounter     // actCount
	note    seqNote        // actLog
	outcome restoreOutcome // actOutcome
	reason  string         // actLog: why, for noteHistoryLost and noteRestarted; actOutcome: why
	seq     uint64         // actApply, actReplay (from), actCutReplay (the reply), actLog, actOutcome (the restored seq), actInexact (the first seq lost)
	arg     uint64         // actCutReplay (the seq before), actLog, actOutcome (if hasArg)
	hasArg  bool           // actOutcome: arg is set
}

func (a seqAction) String() string {
	switch a.kind {
	case actApply:
		return fmt.Sprintf("apply %d", a.seq)
	case actReplay:
		return fmt.Sprintf("request-replay from=%d", a.seq)
	case actCutReplay:
		return fmt.Sprintf("cut-replay seq=%d after=%d", a.seq, a.arg)
	case actInexact:
		return fmt.Sprintf("inexact since=%d", a.seq)
	case actCount:
		return "count " + seqCounterNames[a.counter]
	case actLog:
		n := &seqNotes[a.note]
		s := "log " + n.name
		if n.seqKey != "" {
			s += fmt.Sprintf(" %s=%d %s=%d", n.seqKey, a.seq, n.argKey, a.arg)
		}
		if a.reason != "" {
			s += fmt.Sprintf(" reason=%q", a.reason)
		}
		return s
	case actOutcome:
		o := &restoreOutcomes[a.outcome]
		s := fmt.Sprintf("restore-outcome %s last_seq=%d", o.name, a.seq)
		if a.hasArg {
			s += fmt.Sprintf(" %s=%d", o.argKey, a.arg)
		}
		return s + fmt.Sprintf(" reason=%q", a.reason)
	}
	return seqActionNames[a.kind]
}

// seqRule names each decision step makes; taken records which were followed.
type seqRule uint8

const (
	ruleUnexpected           seqRule = iota // an input the phase does not expect: ignored
	ruleConnectNoReplay                     // a connection without a replay endpoint: nothing to ask
	ruleConnectCatchUp                      // a connection asks for the engine's whole buffer
	ruleEpochNoted                          // a first epoch, or a new one while nothing is held
	ruleEpochRestart                        // a new epoch while the rank holds batches: restart
	ruleLiveCovered                         // a live copy of a batch this connection's replay applied
	ruleLiveBackwards                       // a live seq at or below the last applied: restart
	ruleRestartNoReplay                     // a restart without a replay endpoint: go on live
	ruleRestartRebuild                      // a restart asks for the new incarnation's buffer
	ruleGapAfterLast                        // a live seq past last+1
	ruleGapFromZero                         // a first live seq above 0 after an empty buffer
	ruleGapNoReplay                         // a gap with no replay endpoint: history lost
	ruleGapReplay                           // a gap is replayed
	ruleLiveApply                           // a live batch is applied
	ruleLiveReplayed                        // the gap replay already applied the live batch
	ruleLiveShort                           // the gap replay ended short of the live batch: history lost
	ruleReplyCut                            // a reply whose seq does not increase: the replay is cut off
	ruleReplyAfterOther                     // a reply after another incarnation's batch: skipped
	ruleReplyOther                          // the reply at the last applied seq is another batch
	ruleReplyStartsAbove                    // a first reply above what was asked (not 0), nothing held: history lost
	ruleReplyFirstSeq                       // a first reply above 0 when 0 was asked, nothing held: where the engine starts
	ruleReplyHeld                           // a reply the rank holds: skipped
	ruleReplyJump                           // a reply past last+1: history lost
	ruleReplyApply                          // a reply is applied
	ruleCatchUpOther                        // the catch-up found another incarnation: restart, rebuild
	ruleCatchUpShort                        // the catch-up's buffer ends below the last applied: restart, rebuild
	ruleCatchUpDone                         // the catch-up ended
	ruleCatchUpFailed                       // the catch-up failed
	ruleRebuildDone                         // the rebuild ended
	ruleRebuildFailed                       // the rebuild failed
	ruleGapDone                             // the gap replay ended
	ruleGapFailed                           // the gap replay failed after reaching the live batch
	ruleGapFailedHole                       // the gap replay failed short of the live batch: cleared
	ruleCoveredPartly                       // a failed replay covers what it delivered
	ruleAbandoned                           // the rank stopped during the replay: nothing more
	ruleRestore                             // a restore: the rank holds a snapshot's blocks as of the restored seq
	ruleRestoreCatchUp                      // a restored rank's connection asks for the buffer from the restored seq
	ruleRestoreVerified                     // the catch-up's first reply is the restored batch (same digest)
	ruleRestoreContinues                    // the catch-up's first reply is the restored seq + 1
	ruleRestoreOther                        // the reply at (or below) the restored seq is another batch
	ruleRestoreEpoch                        // the catch-up's first reply has another topic epoch
	ruleRestoreStartsAbove                  // the catch-up's first reply is above the restored seq + 1: rebuilt
	ruleRestoreDone                         // the catch-up continued the restored seq: restored
	ruleRestoreDonePartly                   // ... and then failed: restored as far as it went
	ruleRestoreReset                        // the catch-up showed another incarnation: reset
	ruleRestoreShort                        // the catch-up's buffer ends before the restored seq: reset
	ruleRestoreRebuiltDone                  // the catch-up that rebuilt the rank ended
	ruleRestoreRebuiltFailed                // the catch-up that rebuilt the rank failed
	ruleRestoreFailed                       // the catch-up failed before any reply: the first live batch decides
	ruleRestoreKept                         // without a catch-up, the first live seq follows the restored one: kept
	ruleRestoreLiveCleared                  // without a catch-up, the first live seq is at or below the restored one: cleared
	ruleRestoreLiveAbove                    // without a catch-up, the first live seq is past the restored seq + 1: kept, inexact
	ruleRestoreLiveEpoch                    // without a catch-up, the first live batch has another epoch: cleared
	ruleConnectResume                       // a connection within the catch-up window asks from the last applied seq
	ruleConnectLimited                      // a connection within the window, holding nothing: no catch-up
	ruleUndecodableGap                      // a live batch that does not decode is a gap: replayed
	ruleUndecodableLost                     // ... without a replay endpoint: history lost
	ruleUndecodableReply                    // a replayed batch that does not decode: history lost
	ruleRedoDone                            // the replay of a batch that did not decode ended
	ruleRedoFailed                          // it failed
	ruleRedoShort                           // it did not deliver the batch: history lost
	ruleRedoFailedHole                      // it failed before the batch: cleared
	numSeqRules
)

// seqState.taken has a bit per rule.
var _ [64 - numSeqRules]struct{}

func (s *seqState) took(r seqRule) { s.taken |= 1 << r }

// emit appends an action; after it, an apply is no longer the step's last.
func (s *seqState) emit(a seqAction) {
	s.out = append(s.out, a)
	s.applied = false
}

// step handles one input, appending the actions to out.
func (s *seqState) step(in seqInput, out []seqAction) []seqAction {
	s.out = out
	replaying := s.rp.purpose != replayNone
	applied := s.applied
	s.applied = false
	switch {
	case in.kind == inRestore && !s.started:
		s.restoreFrom(in)
	case in.kind == inUndecodable && applied && in.seq == s.held.last:
		s.undecodable(in.seq)
	case in.kind == inConnect && !replaying:
		s.connect(in.limited)
	case in.kind == inLive && !replaying:
		s.live(in)
	case in.kind == inReplayReply && replaying:
		s.reply(in)
	case replayOutcome(in.kind) && replaying:
		s.replayDone(in.kind)
	default:
		s.took(ruleUnexpected)
	}
	s.started = true
	out, s.out = s.out, nil
	return out
}

// connect starts a new connection's bookkeeping and, when the engine has a
// replay endpoint, catches up from seq 0 so the rank sees the engine's current
// cache (and, at the end, whether this is still the engine it followed).
//
// A restored rank whose outcome is not decided asks from the restored seq
// instead: the reply at that seq shows whether the engine is the one the
// snapshot followed, and what follows it is all the rank lacks.
//
// Full catch-ups are rate-limited (limited: the shell saw one less than
// Config.CatchUpInterval ago), so a flapping or hostile peer cannot make
// the engine resend its whole buffer on every connection. A limited
// connection asks from the last applied seq instead, which checks as much:
// the reply at that seq shows another incarnation by its digest, a buffer
// ending before it a restart, and replies below it are skipped anyway. A
// limited connection to a rank that holds nothing asks for nothing: the
// live rules go on (as after a failed catch-up).
func (s *seqState) connect(limited bool) {
	s.conn = seqConn{}
	switch {
	case !s.canReplay:
		s.took(ruleConnectNoReplay)
	case s.restoring:
		s.took(ruleRestoreCatchUp)
		s.requestReplay(replayRestore, s.held.last)
	case !limited:
		s.took(ruleConnectCatchUp)
		s.requestReplay(replayCatchUp, 0)
	case s.held.ok:
		s.took(ruleConnectResume)
		s.count(countCatchUpsLimited)
		s.requestReplay(replayCatchUp, s.held.last)
	default:
		s.took(ruleConnectLimited)
		s.count(countCatchUpsLimited)
	}
}

// whyUndecodable is the history-lost reason of a batch that does not decode.
const whyUndecodable = "batch does not decode"

// undecodable handles batch seq, which the last step applied and which did
// not decode: nothing of it was applied, and the batch is missing like a
// gap's. A live batch is asked for again from the engine's buffer
// (replayRedo): the rank holds what it held before. Without a replay
// endpoint, or for a replayed batch (the buffer has no other copy of it), it
// is lost: the rank keeps its blocks, is marked inexact, and takes the batch
// as consumed so that the next one follows it.
func (s *seqState) undecodable(seq uint64) {
	switch {
	case s.rp.purpose != replayNone:
		s.took(ruleUndecodableReply)
		s.lost(whyUndecodable, seq, seq+1)
		return
	case !s.canReplay:
		s.took(ruleUndecodableLost)
		s.count(countGaps)
		s.lost(whyUndecodable, seq, seq+1)
		return
	}
	sum := s.held.sum
	s.held = s.prev
	s.took(ruleUndecodableGap)
	s.count(countGaps)
	s.log(noteUndecodable, "", seq, seq)
	s.requestReplay(replayRedo, seq)
	s.rp.redoSum = sum
}

// redoDone ends the replay of a live batch that did not decode. When the
// rank does not hold it afterwards (the replay failed or ended before it,
// or the buffer holds another incarnation), it is lost: the rank keeps its
// blocks, inexact, and the batch counts as consumed. A copy that did not
// decode either was lost as a reply.
func (s *seqState) redoDone(rp *replayRun, ok bool) {
	switch h := &s.held; {
	case h.ok && h.last < rp.from && ok:
		s.took(ruleRedoShort)
		s.lost("replay did not deliver the batch that did not decode", rp.from, rp.from+1)
		*h = seqHeld{ok: true, last: rp.from, sum: rp.redoSum}
	case h.ok && h.last < rp.from:
		s.took(ruleRedoFailedHole)
		s.replayFailed()
		s.log(noteGapNotRecovered, "", rp.from, rp.from+1)
		s.inexact(rp.from)
		*h = seqHeld{ok: true, last: rp.from, sum: rp.redoSum}
	case ok:
		s.took(ruleRedoDone)
	default:
		s.took(ruleRedoFailed)
		s.replayFailed()
	}
	s.markCovered(rp, ok)
}

// live handles a batch from the live stream. A change of SGLang's topic epoch
// is a restart even when the new incarnation's seq has passed the old one's.
func (s *seqState) live(in seqInput) {
	if s.restoring {
		s.restoreLive(in)
	}
	b := pendingLive{ok: true, seq: in.seq, sum: in.sum, next: stageBackwards}
	if s.noteEpoch(in.epoch) && s.held.ok {
		s.took(ruleEpochRestart)
		if s.restartAndRebuild("topic epoch changed", in.seq) {
			s.pending = b
			return
		}
	}
	s.liveRules(b)
}

// noteEpoch records the topic's epoch and reports whether it replaced another.
func (s *seqState) noteEpoch(ep []byte) bool {
	if ep == nil || bytes.Equal(ep, s.epoch) {
		return false
	}
	changed := s.epoch != nil
	s.epoch = append(s.epoch[:0], ep...)
	if !changed || !s.held.ok {
		s.took(ruleEpochNoted)
	}
	return changed
}

// liveRules handles live batch b from stage b.next on: behind what the rank
// holds (a copy a replay applied, or a restart), ahead of it (a gap), or
// next. Where a replay is asked for, b waits for it in s.pending.
func (s *seqState) liveRules(b pendingLive) {
	h := &s.held
	if b.next <= stageBackwards && h.ok && b.seq <= h.last {
		if s.conn.covers(b.seq) {
			s.took(ruleLiveCovered)
			s.conn.liveSeen, s.conn.liveLast = true, b.seq
			return
		}
		s.took(ruleLiveBackwards)
		if s.restartAndRebuild("seq went backwards", b.seq) {
			b.next = stageGap
			s.pending = b
			return
		}
	}
	if b.next <= stageGap {
		s.conn.liveSeen, s.conn.liveLast = true, b.seq
		if s.gap(b.seq) {
			b.next = stageApply
			s.pending = b
			return
		}
	}
	switch {
	case h.ok && b.seq <= h.last:
		s.took(ruleLiveReplayed)
		return
	case h.ok && b.seq != h.last+1:
		s.took(ruleLiveShort)
		s.lost("replay did not reach the live seq", h.last+1, b.seq)
	default:
		s.took(ruleLiveApply)
	}
	s.emitApply(b.seq, b.sum)
}

// gap checks live seq for batches the live stream skipped and, when there
// are some and the engine can replay them, asks for them (reporting true).
func (s *seqState) gap(seq uint64) bool {
	var from uint64
	switch h := &s.held; {
	case h.ok && seq > h.last+1:
		s.took(ruleGapAfterLast)
		from = h.last + 1
	case !h.ok && h.fromZero && seq > 0:
		s.took(ruleGapFromZero)
		from = 0
	default:
		return false
	}
	s.count(countGaps)
	if !s.canReplay {
		s.took(ruleGapNoReplay)
		s.lost("gap and no replay endpoint", from, seq)
		s.skipTo(seq)
		return false
	}
	s.took(ruleGapReplay)
	s.log(noteGapReplaying, "", from, seq)
	s.requestReplay(replayGap, from)
	return true
}

// restartAndRebuild clears the rank for a new engine incarnation and, when
// the engine has a replay endpoint, asks for its buffer from seq 0
// (reporting true).
func (s *seqState) restartAndRebuild(why string, got uint64) bool {
	s.restart(why, s.held.last, got)
	if !s.canReplay {
		s.took(ruleRestartNoReplay)
		return false
	}
	s.took(ruleRestartRebuild)
	s.requestReplay(replayRebuild, 0)
	return true
}

// reply handles one batch of the replay in progress. Replies must strictly
// increase: a peer repeating a batch forever cannot wedge the rank.
func (s *seqState) reply(in seqInput) {
	rp, h := &s.rp, &s.held
	if rp.seen && in.seq <= rp.maxSeen {
		s.took(ruleReplyCut)
		s.emit(seqAction{kind: actCutReplay, seq: in.seq, arg: rp.maxSeen})
		return
	}
	first := !rp.seen
	rp.seen, rp.maxSeen = true, in.seq
	if first && rp.purpose == replayRestore && s.restoreReply(in) {
		return
	}
	switch {
	case rp.other:
		s.took(ruleReplyAfterOther)
		return
	case h.ok && in.seq == h.last && in.sum != h.sum:
		s.took(ruleReplyOther)
		rp.other = true
		return
	}
	const startsAbove = "replay buffer starts above the requested seq"
	switch {
	case !first || h.ok || in.seq <= rp.from:
	case rp.from == 0:
		// A buffer asked from 0 (a new connection, a new incarnation)
		// starts where the engine's numbering does: nothing was lost.
		s.took(ruleReplyFirstSeq)
	default:
		s.took(ruleReplyStartsAbove)
		s.lost(startsAbove, rp.from, in.seq)
	}
	if h.ok {
		if in.seq <= h.last {
			s.took(ruleReplyHeld)
			return
		}
		if in.seq > h.last+1 {
			s.took(ruleReplyJump)
			s.lost(startsAbove, h.last+1, in.seq)
		}
	}
	s.took(ruleReplyApply)
	s.emitApply(in.seq, in.sum)
	// The buffer is the running incarnation's: after a catch-up found a
	// restart and rebuilt, the live copies of what the rebuild applied
	// carry this epoch and must not be taken for a second restart.
	if in.epoch != nil {
		s.epoch = append(s.epoch[:0], in.epoch...)
	}
}

// replayDone ends the replay in progress and carries on with what waited for
// it. A replay abandoned because the rank stops leaves everything as it is.
func (s *seqState) replayDone(kind seqInputKind) {
	rp, b := s.rp, s.pending
	s.rp, s.pending = replayRun{}, pendingLive{}
	if kind == inReplayAbandoned {
		s.took(ruleAbandoned)
		return
	}
	ok := kind == inReplayEnd
	switch rp.purpose {
	case replayCatchUp:
		s.catchUpDone(&rp, ok)
	case replayRebuild:
		s.took(pick(ok, ruleRebuildDone, ruleRebuildFailed))
		s.caughtUp(&rp, ok)
	case replayGap:
		s.gapDone(&rp, b.seq, ok)
	case replayRestore:
		s.restoreDone(&rp, ok)
	case replayRedo:
		s.redoDone(&rp, ok)
	}
	if b.ok {
		s.liveRules(b)
	}
}

// catchUpDone ends a connection's catch-up. A buffer whose batch at the last
// applied seq is another one, or that ends below the last applied seq, means
// the engine restarted while the connection was down: without the first
// check, a new incarnation that has already published past the old seq would
// have its later batches applied on top of the old one's.
func (s *seqState) catchUpDone(rp *replayRun, ok bool) {
	switch {
	case rp.other:
		s.took(ruleCatchUpOther)
		s.restart("replay buffer holds another batch at the last applied seq", rp.lastBefore, rp.maxSeen)
		s.requestReplay(replayRebuild, 0)
	case ok && rp.heldBefore && (!rp.seen || rp.maxSeen < rp.lastBefore):
		s.took(ruleCatchUpShort)
		s.restart("replay buffer ends before the last applied seq", rp.lastBefore, rp.maxSeen)
		s.requestReplay(replayRebuild, 0)
	default:
		s.took(pick(ok, ruleCatchUpDone, ruleCatchUpFailed))
		s.caughtUp(rp, ok)
	}
}

// caughtUp ends a replay from seq 0: an empty buffer means the engine's next
// batch is seq 0.
func (s *seqState) caughtUp(rp *replayRun, ok bool) {
	s.markCovered(rp, ok)
	if !ok {
		s.replayFailed()
		return
	}
	s.held.fromZero = !s.held.ok
}

// gapDone ends a gap replay for live batch seq. A failure that leaves a hole
// before seq keeps the rank's blocks, marks it inexact and takes the hole
// as consumed: seq is applied next.
func (s *seqState) gapDone(rp *replayRun, seq uint64, ok bool) {
	switch h := &s.held; {
	case ok:
		s.took(ruleGapDone)
	case h.ok && seq > h.last+1:
		s.took(ruleGapFailedHole)
		s.replayFailed()
		s.log(noteGapNotRecovered, "", h.last+1, seq)
		s.inexact(h.last + 1)
		s.skipTo(seq)
	default:
		s.took(ruleGapFailed)
		s.replayFailed()
	}
	s.markCovered(rp, ok)
}

// markCovered records, after a replay on this connection, up to which seq
// live batches are copies of what the rank holds. A replay that failed
// covers only what it delivered: without this, the live copies of batches it
// applied before failing would be taken for an engine restart.
func (s *seqState) markCovered(rp *replayRun, ok bool) {
	switch c := &s.conn; {
	case ok:
		c.covered, c.coveredTo = s.held.ok, s.held.last
	case rp.seen && s.held.ok:
		s.took(ruleCoveredPartly)
		c.covered, c.coveredTo = true, min(s.held.last, rp.maxSeen)
	}
}

func (s *seqState) requestReplay(p replayPurpose, from uint64) {
	s.rp = replayRun{purpose: p, from: from, heldBefore: s.held.ok, lastBefore: s.held.last}
	s.emit(seqAction{kind: actReplay, seq: from})
}

// restart records an engine restart and clears the rank.
func (s *seqState) restart(why string, last, got uint64) {
	s.count(countRestarts)
	s.log(noteRestarted, why, last, got)
	s.clear()
	s.conn.liveSeen = false
}

// lost records that batches [want, got) cannot be recovered. The rank keeps
// its blocks: what the lost batches removed is an over-claim, which heals
// (a request routed for a block the engine no longer holds makes it store
// the block again) and is bounded by the rank's capacity; clearing would
// turn it into an under-claim of every block, which does not heal (engines
// announce a block once, when they store it).
func (s *seqState) lost(why string, want, got uint64) {
	s.count(countReplayFailures)
	s.log(noteHistoryLost, why, want, got)
	s.inexact(want)
}

// inexact marks the rank inexact since seq (the shell keeps the first seq
// until the rank is cleared).
func (s *seqState) inexact(seq uint64) { s.emit(seqAction{kind: actInexact, seq: seq}) }

// skipTo takes the batches before seq as consumed (lost), so that seq
// follows what the rank holds. The digest of seq-1 is not known: an apply
// of seq follows at once.
func (s *seqState) skipTo(seq uint64) {
	if s.held.ok && seq > 0 {
		s.held.last, s.held.sum = seq-1, 0
	}
}

func (s *seqState) replayFailed() {
	s.count(countReplayFailures)
	s.log(noteReplayFailed, "", 0, 0)
}

func (s *seqState) clear() {
	s.emit(seqAction{kind: actClear})
	s.held.ok, s.held.fromZero, s.conn.covered = false, false, false
}

// emitApply asks the shell to apply batch seq; it is the step's last action
// (the shell steps undecodable right after when the batch does not decode).
func (s *seqState) emitApply(seq, sum uint64) {
	s.emit(seqAction{kind: actApply, seq: seq})
	s.prev, s.applied = s.held, true
	s.held = seqHeld{ok: true, last: seq, sum: sum}
}

func (s *seqState) count(c seqCounter) { s.emit(seqAction{kind: actCount, counter: c}) }

func (s *seqState) log(n seqNote, reason string, seq, arg uint64) {
	s.emit(seqAction{kind: actLog, note: n, reason: reason, seq: seq, arg: arg})
}

func pick(ok bool, yes, no seqRule) seqRule {
	if ok {
		return yes
	}
	return no
}

// epochKey marks SGLang's per-incarnation topic suffix.
var epochKey = []byte("sgl-kv-epoch=")

// topicEpoch returns the value of topic's sgl-kv-epoch suffix, nil if it has
// none.
func topicEpoch(topic []byte) []byte {
	i := bytes.Index(topic, epochKey)
	if i < 0 {
		return nil
	}
	return topic[i+len(epochKey):]
}

// String describes the state, for scripts and debugging.
func (s *seqState) String() string {
	var b strings.Builder
	if s.held.ok {
		fmt.Fprintf(&b, "last=%d sum=%d", s.held.last, s.held.sum)
		if s.restoring {
			b.WriteString(" restoring")
		}
	} else {
		b.WriteString("empty")
		if s.held.fromZero {
			b.WriteString(" from-zero")
		}
	}
	if s.conn.covered {
		fmt.Fprintf(&b, " covered-to=%d", s.conn.coveredTo)
	}
	if s.conn.liveSeen {
		fmt.Fprintf(&b, " live-last=%d", s.conn.liveLast)
	}
	if s.epoch != nil {
		fmt.Fprintf(&b, " epoch=%q", s.epoch)
	}
	if rp := &s.rp; rp.purpose != replayNone {
		fmt.Fprintf(&b, "\nreplaying %s from=%d", replayPurposeNames[rp.purpose], rp.from)
		if rp.seen {
			fmt.Fprintf(&b, " max-seen=%d", rp.maxSeen)
		}
		if rp.other {
			b.WriteString(" other-incarnation")
		}
	}
	if s.pending.ok {
		fmt.Fprintf(&b, "\nwaiting live %d (at %s)", s.pending.seq, liveStageNames[s.pending.next])
	}
	return b.String()
}
