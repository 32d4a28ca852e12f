package ingest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// rankActionCases are TestRankCarriesOutActions' scenarios.
var rankActionCases = []struct {
	name  string
	run   func(r *rank, rp *scriptReplayer)
	trace string
	want  RankStatus // the counters and LastSeq compared
	logs  []string   // in the log, in order
}{
	{name: "gap replayed",
		run: func(r *rank, rp *scriptReplayer) {
			rp.set(0, 1)
			r.onConnect()
			rp.set(0, 8)
			live(r, 0, 2, 5, 6, 9)
		},
		trace: "0 1 2 3 4 5 6 7 8 9",
		want:  RankStatus{Gaps: 1, Replays: 2, LastSeq: 9, EventsApplied: 10},
		logs:  []string{`msg="kv events: gap, replaying" from=3 live=5`}},
	{name: "gap without a replay endpoint",
		run: func(r *rank, rp *scriptReplayer) {
			r.replay, r.seq.canReplay = nil, false
			r.onConnect()
			live(r, 0, 0, 1, 4)
		},
		trace: "0 1 inexact 4",
		want:  RankStatus{Gaps: 1, ReplayFailures: 1, LastSeq: 4, EventsApplied: 3, Inexact: true, InexactSinceSeq: 2},
		logs: []string{`level=WARN msg="kv events: history lost, keeping the worker rank's blocks (inexact)" ` +
			`reason="gap and no replay endpoint" missing_from=2 resumes_at=4`,
			`level=WARN msg="kv events: worker rank inexact: blocks kept, some may be gone from the engine" since_seq=2`}},
	{name: "gap replay fails",
		run: func(r *rank, rp *scriptReplayer) {
			rp.set(0, 1)
			r.onConnect()
			rp.fail = true
			live(r, 0, 2, 5)
		},
		trace: "0 1 2 inexact 5",
		want:  RankStatus{Gaps: 1, Replays: 2, ReplayFailures: 1, LastSeq: 5, EventsApplied: 4, Inexact: true, InexactSinceSeq: 3},
		logs: []string{`level=WARN msg="kv events: replay failed" err="scripted replay failure"`,
			`level=WARN msg="kv events: gap not recovered, keeping the worker rank's blocks (inexact)" missing_from=3 resumes_at=5`}},
	{name: "inexact, then cleared by an engine restart",
		run: func(r *rank, rp *scriptReplayer) {
			r.replay, r.seq.canReplay = nil, false
			r.onConnect()
			live(r, 0, 0, 1, 4, 2)
		},
		trace: "0 1 inexact 4 clear exact 2",
		want:  RankStatus{Gaps: 1, ReplayFailures: 1, EngineRestarts: 1, LastSeq: 2, EventsApplied: 4},
		logs:  []string{`level=INFO msg="kv events: worker rank exact again (cleared)"`}},
	{name: "replay repeating a batch is cut off",
		run: func(r *rank, rp *scriptReplayer) {
			rp.set(0, 3)
			rp.repeat = true
			r.onConnect()
			live(r, 0, 4) // a gap after what the cut replay covered
		},
		trace: "0 1 2 3 4",
		want:  RankStatus{Gaps: 1, Replays: 2, ReplayFailures: 1, LastSeq: 4, EventsApplied: 5},
		logs:  []string{`err="replay seqs out of order: 0 after 0"`}},
	{name: "engine restarted while away, buffer empty",
		run: func(r *rank, rp *scriptReplayer) {
			rp.set(0, 3)
			r.onConnect()
			rp.set(1, 0)
			r.onConnect()
		},
		trace: "0 1 2 3 clear",
		// LastSeq is 0 until the new incarnation's first batch.
		want: RankStatus{Replays: 3, EngineRestarts: 1, LastSeq: 0, EventsApplied: 4},
		logs: []string{`level=WARN msg="kv events: engine restarted, clearing worker rank" ` +
			`reason="replay buffer ends before the last applied seq" last_seq=3 seq=0`}},
	{name: "engine restarted, seen on the live stream",
		run: func(r *rank, rp *scriptReplayer) {
			rp.set(0, 3)
			r.onConnect()
			live(r, 0, 4)
			rp.gen = 1
			rp.set(0, 1)
			live(r, 1, 1, 2)
		},
		trace: "0 1 2 3 4 clear 0 1 2",
		want:  RankStatus{Replays: 2, EngineRestarts: 1, LastSeq: 2, EventsApplied: 8},
		logs:  []string{`reason="seq went backwards" last_seq=4 seq=1`}},
	{name: "topic epoch changed",
		run: func(r *rank, rp *scriptReplayer) {
			rp.set(1, 0)
			r.onConnect()
			r.onBatch(0, []byte("kv@sgl-kv-epoch=a"), genPayload(0, 0))
			rp.gen = 1
			rp.set(0, 5)
			r.onBatch(5, []byte("kv@sgl-kv-epoch=b"), genPayload(5, 1))
		},
		trace: "0 clear 0 1 2 3 4 5",
		want:  RankStatus{Replays: 2, EngineRestarts: 1, LastSeq: 5, EventsApplied: 7},
		logs:  []string{`reason="topic epoch changed" last_seq=0 seq=5`}},
	{name: "restored",
		run: func(r *rank, rp *scriptReplayer) {
			r.restoreFrom(restorePos(3, 0, ""))
			rp.set(0, 6)
			r.onConnect()
			live(r, 0, 5, 6, 7)
		},
		trace: "4 5 6 7",
		want:  RankStatus{Replays: 1, LastSeq: 7, EventsApplied: 4, Restore: "restored"},
		logs: []string{`level=INFO msg="kv events: restored from snapshot, nothing lost" ` +
			`last_seq=3 caught_up_to=6 reason="replay buffer holds the restored batch"`}},
	{name: "restore rebuilt",
		run: func(r *rank, rp *scriptReplayer) {
			r.restoreFrom(restorePos(3, 0, ""))
			rp.set(6, 8)
			r.onConnect()
		},
		trace: "inexact 6 7 8",
		want:  RankStatus{Replays: 1, LastSeq: 8, EventsApplied: 3, Restore: "rebuilt", Inexact: true, InexactSinceSeq: 4},
		logs: []string{`level=WARN msg="kv events: restore: history lost, keeping the snapshot's blocks (inexact)" ` +
			`last_seq=3 resumes_at=6 reason="replay buffer starts above the restored seq + 1"`}},
	{name: "restore reset, another batch at the restored seq",
		run: func(r *rank, rp *scriptReplayer) {
			r.restoreFrom(restorePos(3, 0, ""))
			rp.gen = 1
			rp.set(0, 4)
			r.onConnect()
		},
		trace: "clear 0 1 2 3 4",
		want:  RankStatus{Replays: 2, LastSeq: 4, EventsApplied: 5, Restore: "reset"},
		logs: []string{`level=WARN msg="kv events: restore: engine restarted, clearing worker rank" ` +
			`last_seq=3 seq=4 reason="replay buffer holds another batch at the restored seq"`}},
	{name: "restore reset, empty buffer",
		run: func(r *rank, rp *scriptReplayer) {
			r.restoreFrom(restorePos(3, 0, ""))
			rp.set(1, 0)
			r.onConnect()
		},
		trace: "clear",
		// LastSeq is 0 until the new incarnation's first batch.
		want: RankStatus{Replays: 2, LastSeq: 0, Restore: "reset"},
		logs: []string{`last_seq=3 reason="replay buffer ends before the restored seq"`}},
	{name: "restore reset, epoch in the replay's topic",
		run: func(r *rank, rp *scriptReplayer) {
			r.restoreFrom(restorePos(3, 0, "a"))
			rp.set(0, 4)
			rp.topic = []byte("kv@sgl-kv-epoch=b")
			r.onConnect()
			r.onBatch(5, []byte("kv@sgl-kv-epoch=b"), seqPayload(5))
		},
		trace: "clear 0 1 2 3 4 5",
		want:  RankStatus{Replays: 2, LastSeq: 5, EventsApplied: 6, Restore: "reset"},
		logs:  []string{`last_seq=3 seq=4 reason="topic epoch changed"`}},
	{name: "restore kept without a replay endpoint",
		run: func(r *rank, rp *scriptReplayer) {
			r.replay, r.seq.canReplay = nil, false
			r.restoreFrom(restorePos(3, 0, ""))
			r.onConnect()
			live(r, 0, 4, 5)
		},
		trace: "4 5",
		want:  RankStatus{LastSeq: 5, EventsApplied: 2, Restore: "kept"},
		logs: []string{`level=INFO msg="kv events: restored from snapshot, kept" last_seq=3 live_seq=4 ` +
			`reason="first live seq follows the restored seq"`}},
	{name: "restore inexact without a replay endpoint",
		run: func(r *rank, rp *scriptReplayer) {
			r.replay, r.seq.canReplay = nil, false
			r.restoreFrom(restorePos(3, 0, ""))
			r.onConnect()
			live(r, 0, 9)
		},
		trace: "inexact 9",
		want:  RankStatus{LastSeq: 9, EventsApplied: 1, Restore: "rebuilt", Inexact: true, InexactSinceSeq: 4},
		logs: []string{`level=WARN msg="kv events: restore: history lost, keeping the snapshot's blocks (inexact)" ` +
			`last_seq=3 resumes_at=9 reason="first live seq is past the restored seq + 1"`}},
	{name: "restore cleared without a replay endpoint",
		run: func(r *rank, rp *scriptReplayer) {
			r.replay, r.seq.canReplay = nil, false
			r.restoreFrom(restorePos(3, 0, ""))
			r.onConnect()
			live(r, 0, 2)
		},
		trace: "clear 2",
		want:  RankStatus{LastSeq: 2, EventsApplied: 1, Restore: "cleared"},
		logs: []string{`level=WARN msg="kv events: restore: clearing worker rank" last_seq=3 live_seq=2 ` +
			`reason="first live seq is not past the restored seq"`}},
}

// restorePos is the position after seq of incarnation gen, in epoch.
func restorePos(seq uint64, gen byte, epoch string) Position {
	return Position{HasSeq: true, Seq: seq, Sum: xxhash.Sum64(genPayload(seq, gen)), Epoch: epoch}
}

// TestRankCarriesOutActions runs the applier's shell, with a scripted replay
// buffer and a sink that records what it was given, through scenarios that
// make the state machine (whose rules testdata/seq has) produce every kind
// of action: the shell must apply the right payloads, clear the sink, run
// and cut off replays, keep the status counters and write the log lines.
func TestRankCarriesOutActions(t *testing.T) {
	for _, tc := range rankActionCases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			rec, rp := &recordSink{}, &scriptReplayer{}
			r := &rank{worker: "w", sink: rec, replay: rp, seq: seqState{canReplay: true},
				log: slog.New(slog.NewTextHandler(&logs, nil)), ctx: context.Background()}
			tc.run(r, rp)
			if got := strings.Join(rec.trace, " "); got != tc.trace {
				t.Errorf("trace %q, want %q", got, tc.trace)
			}
			got := r.status()
			got.Connected, got.DecodeErrors, got.CachedBlocks, got.Problems = false, 0, 0, nil
			want := tc.want
			want.CaughtUp = true // every scenario connects, and onConnect runs the catch-up to its end
			if !reflect.DeepEqual(got, want) {
				t.Errorf("status %+v\nwant   %+v", got, want)
			}
			rest := logs.String()
			for _, l := range tc.logs {
				i := strings.Index(rest, l)
				if i < 0 {
					t.Fatalf("log lacks (in order) %s:\n%s", l, logs.String())
				}
				rest = rest[i+len(l):]
			}
		})
	}
}

// live hands the rank live batches of engine incarnation gen.
func live(r *rank, gen byte, seqs ...uint64) {
	for _, seq := range seqs {
		r.onBatch(seq, nil, genPayload(seq, gen))
	}
}

func seqPayload(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// genPayload is seq's payload in engine incarnation gen (gen 0: seqPayload).
func genPayload(seq uint64, gen byte) []byte {
	p := seqPayload(seq)
	if gen != 0 {
		p = append(p, gen)
	}
	return p
}

// recordSink records applied seqs (from seqPayload) and clears.
type recordSink struct{ trace []string }

func (s *recordSink) apply(p []byte, st *batchStats) error {
	s.trace = append(s.trace, strconv.FormatUint(binary.BigEndian.Uint64(p), 10))
	st.events++
	return nil
}
func (s *recordSink) reset()               { s.trace = append(s.trace, "clear") }
func (s *recordSink) cached() uint64       { return 0 }
func (s *recordSink) otherRanks() []uint32 { return nil }
func (s *recordSink) adopt([]uint32)       {}

// track records the rank becoming inexact, and exact again.
func (s *recordSink) track(on bool) {
	s.trace = append(s.trace, map[bool]string{true: "inexact", false: "exact"}[on])
}
func (s *recordSink) trim(uint64) uint64 { return 0 }

// scriptReplayer serves seqs lo..hi of incarnation gen (none when lo > hi),
// with topic in every reply (nil: replies without one).
type scriptReplayer struct {
	lo, hi uint64
	gen    byte
	topic  []byte
	fail   bool // the next replay fails, delivering nothing
	repeat bool // the next replay sends its first batch twice
}

func (s *scriptReplayer) set(lo, hi uint64) { s.lo, s.hi = lo, hi }

func (s *scriptReplayer) replay(_ context.Context, start uint64, fn replyFunc) error {
	fail, repeat := s.fail, s.repeat
	s.fail, s.repeat = false, false
	if fail {
		return errors.New("scripted replay failure")
	}
	for seq := max(start, s.lo); seq <= s.hi; seq++ {
		if err := fn(seq, s.topic, genPayload(seq, s.gen)); err != nil {
			return err
		}
		if repeat {
			repeat = false
			if err := fn(seq, s.topic, genPayload(seq, s.gen)); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestRankCaughtUp: a rank reports CaughtUp only once its first
// connection's catch-up has ended, here a replay of the engine's buffer.
func TestRankCaughtUp(t *testing.T) {
	rec, rp := &recordSink{}, &scriptReplayer{}
	r := &rank{worker: "w", sink: rec, replay: rp, seq: seqState{canReplay: true},
		log: slog.New(slog.DiscardHandler), ctx: context.Background()}
	if r.status().CaughtUp {
		t.Fatal("CaughtUp before any connection")
	}
	rp.set(0, 3)
	r.onConnect()
	if st := r.status(); !st.CaughtUp || st.LastSeq != 3 {
		t.Fatalf("after the catch-up: %+v; want CaughtUp at seq 3", st)
	}
}
