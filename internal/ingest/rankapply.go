package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cespare/xxhash/v2"
)

// applyLoop applies the queue in order, after the restore if there is one,
// and pauses between two batches when Checkpoint asks.
func (r *rank) applyLoop() {
	defer r.wg.Done()
	if r.resume != nil {
		r.restoreFrom(*r.resume)
	}
	for {
		select {
		case <-r.ctx.Done():
			return
		case p := <-r.pauses:
			r.hold(p)
		case it := <-r.q:
			if it.connected {
				r.dequeued(it)
				r.onConnect()
				continue
			}
			r.onBatch(it.seq, it.topic, it.payload)
			r.dequeued(it)
		}
	}
}

// restoreFrom steps the snapshot's position in: the index holds the rank's
// blocks as of p.Seq.
func (r *rank) restoreFrom(p Position) {
	r.lastSeq.Store(p.Seq)
	r.handle(seqInput{kind: inRestore, seq: p.Seq, sum: p.Sum, epoch: []byte(p.Epoch)}, nil)
	r.bound() // the snapshot's blocks were exact as of p.Seq
}

// onConnect tells the sequence state machine that a new connection is up,
// and whether a full catch-up was allowed less than catchUpInterval ago.
func (r *rank) onConnect() {
	now := time.Now()
	limited := r.catchUpInterval > 0 && !r.lastFull.IsZero() && now.Sub(r.lastFull) < r.catchUpInterval
	if !limited {
		r.lastFull = now
	}
	r.handle(seqInput{kind: inConnect, limited: limited}, nil)
	// handle ran the catch-up the connection asked for (if any) to its
	// end: replied, failed or cut.
	r.caughtUp.Store(true)
}

// onBatch hands it one batch from the live stream.
func (r *rank) onBatch(seq uint64, topic, payload []byte) {
	in := seqInput{kind: inLive, seq: seq, sum: xxhash.Sum64(payload), epoch: topicEpoch(topic)}
	r.handle(in, payload)
}

// handle steps one input into the sequence state machine and carries out its
// actions. A replay it asks for runs here: its replies are stepped in as they
// arrive, then its end (or failure), until the state machine asks for no
// more. payload is the live batch's, for the actions that apply it.
func (r *rank) handle(in seqInput, payload []byte) {
	acts := r.seq.step(in, r.acts[:0])
	for {
		from, replay, _ := r.execute(acts, payload, false)
		r.acts = acts[:0]
		if !replay {
			return
		}
		acts = r.seq.step(r.runReplay(from), r.acts[:0])
	}
}

// runReplay asks the engine for its buffer from seq from on and returns how
// the replay ended. A rank stopped under it abandoned it: it did not fail.
func (r *rank) runReplay(from uint64) seqInput {
	r.replays.Add(1)
	err := r.replay.replay(r.ctx, from, r.onReply)
	switch {
	case r.ctx.Err() != nil:
		return seqInput{kind: inReplayAbandoned}
	case err != nil:
		r.replayErr = err
		return seqInput{kind: inReplayFailed}
	}
	return seqInput{kind: inReplayEnd}
}

// onReply steps one replayed batch in (topic: the reply's, nil if it has
// none); an error cuts the replay off.
func (r *rank) onReply(seq uint64, topic, payload []byte) error {
	in := seqInput{kind: inReplayReply, seq: seq, sum: xxhash.Sum64(payload), epoch: topicEpoch(topic)}
	acts := r.seq.step(in, r.replyActs[:0])
	_, _, cut := r.execute(acts, payload, false)
	r.replyActs = acts[:0]
	if cut == nil {
		r.between()
	}
	return cut
}

// execute carries out one step's actions; payload is the batch the step was
// about. It returns the replay asked for, if any, and the error that cuts
// off a replay whose seqs do not increase. An apply whose batch does not
// decode (the step's last action) steps undecodable in and carries out its
// actions too (redo: those; nothing they apply is the same batch again).
func (r *rank) execute(acts []seqAction, payload []byte, redo bool) (from uint64, replay bool, cut error) {
	for i := range acts {
		switch a := &acts[i]; a.kind {
		case actApply:
			if !r.applyBatch(a.seq, payload) && !redo && i == len(acts)-1 {
				more := r.seq.step(seqInput{kind: inUndecodable, seq: a.seq}, r.badActs[:0])
				f, rp, c := r.execute(more, nil, true)
				r.badActs = more[:0]
				if rp {
					from, replay = f, true
				}
				if c != nil {
					cut = c
				}
			}
		case actClear:
			r.sink.reset()
			r.markExact()
		case actInexact:
			r.markInexact(a.seq)
		case actReplay:
			from, replay = a.seq, true
		case actCutReplay:
			cut = fmt.Errorf("%w: %d after %d", errReplayOrder, a.seq, a.arg)
		case actCount:
			r.count(a.counter)
		case actLog:
			r.logNote(a)
		case actOutcome:
			r.outcome(a)
		}
	}
	return from, replay, cut
}

// count adds one to a status counter and its metric.
func (r *rank) count(c seqCounter) {
	switch c {
	case countGaps:
		r.gaps.Add(1)
	case countReplayFailures:
		r.replayFailures.Add(1)
	case countRestarts:
		r.restarts.Add(1)
		r.lastSeq.Store(0) // nothing of the new incarnation applied yet
	case countCatchUpsLimited:
		r.limited.Add(1)
	}
}

// logNote writes the log line an action asks for.
func (r *rank) logNote(a *seqAction) {
	n := &seqNotes[a.note]
	var args []any
	switch {
	case a.note == noteReplayFailed:
		args = []any{"err", r.replayErr}
	case a.reason != "":
		args = []any{"reason", a.reason, n.seqKey, a.seq, n.argKey, a.arg}
	default:
		args = []any{n.seqKey, a.seq, n.argKey, a.arg}
	}
	if n.warn {
		r.log.Warn(n.msg, args...)
	} else {
		r.log.Info(n.msg, args...)
	}
}

// outcome records a restore's outcome: the status, its counter and its one
// log line.
func (r *rank) outcome(a *seqAction) {
	o := &restoreOutcomes[a.outcome]
	r.restore.Store(uint32(a.outcome) + 1)
	if r.met != nil {
		r.met.restores[a.outcome].Inc()
	}
	if a.outcome == outcomeReset {
		r.lastSeq.Store(0) // nothing of the new incarnation applied yet
	}
	args := []any{"last_seq", a.seq}
	if a.hasArg {
		args = append(args, o.argKey, a.arg)
	}
	args = append(args, "reason", a.reason)
	level := slog.LevelInfo
	if o.warn {
		level = slog.LevelWarn
	}
	r.log.Log(context.Background(), level, o.msg, args...)
}

// applyBatch decodes one batch and applies it to the index. It reports
// false when the batch does not decode: nothing of it was applied, and it
// must not count as applied. A batch refused for what it says (a dp rank no
// engine has) is applied as nothing: its seq is consumed.
func (r *rank) applyBatch(seq uint64, payload []byte) bool {
	r.st.reset()
	err := r.sink.apply(payload, &r.st)
	if errors.Is(err, errGateClosed) {
		return true // removed: the rank is stopping, nothing is recorded
	}
	if err != nil {
		r.decodeErrors.Add(1)
		if r.met != nil {
			r.met.decodeErrors.Inc()
		}
		if !errors.Is(err, errRefused) {
			r.problem(seq, "decode_error", 1, err.Error())
			return false
		}
		r.problem(seq, "batch_refused", 1, err.Error())
	}
	if r.st.cleared {
		r.markExact()
	}
	r.noteProblems(seq, &r.st)
	r.bound()
	r.eventsApplied.Add(uint64(r.st.events))
	if r.met != nil {
		r.met.record(seq, &r.st)
	}
	if r.st.decodeErrors > 0 {
		r.decodeErrors.Add(uint64(r.st.decodeErrors))
		if r.logLimit.allow() {
			r.log.Warn("kv events: events skipped", "seq", seq,
				"count", r.st.decodeErrors, "err", r.st.firstErr)
		}
	}
	// LastSeq is published last: whoever reads it sees the index and the
	// counters as this batch left them, capacity trim included.
	r.lastSeq.Store(seq)
	return true
}
