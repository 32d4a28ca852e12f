package ingest

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"strconv"
	"testing"
)

// FuzzApplier drives the sequence logic with an engine that publishes
// batches, a live socket that drops some of them, reconnects, and a replay
// buffer of bounded length, and checks what the sink saw:
//
//   - between two clears, applied seqs are consecutive;
//   - the last published seq, delivered live, is the last applied;
//   - when the buffer never loses history, nothing is ever cleared and every
//     seq is applied exactly once, in order.
func FuzzApplier(f *testing.F) {
	f.Add(uint16(10000), []byte{0, 0, 0, 1, 1, 0, 2, 0, 1, 1, 1, 0})
	f.Add(uint16(3), []byte{0, 1, 1, 1, 1, 0, 2, 1, 1, 1, 1, 1, 0, 0})
	f.Add(uint16(0), []byte{0, 1, 0, 2, 0, 1, 1, 0})
	f.Fuzz(func(t *testing.T, keep uint16, ops []byte) {
		if len(ops) > 400 {
			ops = ops[:400]
		}
		rec := &recordSink{}
		rp := &engineReplayer{keep: uint64(keep)}
		r := &rank{worker: "w", sink: rec, log: slog.New(slog.NewTextHandler(io.Discard, nil)), ctx: context.Background()}
		if keep > 0 {
			r.replay, r.seq.canReplay = rp, true
		}
		r.onConnect()
		for _, op := range ops {
			switch op % 3 {
			case 0: // published and delivered
				r.onBatch(rp.publish(), nil, seqPayload(rp.published-1))
			case 1: // published, dropped on the live socket
				rp.publish()
			case 2: // the connection drops and comes back
				r.onConnect()
			}
		}
		last := rp.publish()
		r.onBatch(last, nil, seqPayload(last))

		// Seqs apply in order, except after a clear, or once the rank is
		// inexact (history lost, blocks kept) until it is cleared.
		var prev int64 = -1
		clears, inexact := 0, false
		for _, tok := range rec.trace {
			switch tok {
			case "clear":
				prev = -1
				clears++
				continue
			case "inexact":
				inexact = true
				continue
			case "exact":
				inexact = false
				continue
			}
			v, _ := strconv.ParseInt(tok, 10, 64)
			if prev >= 0 && v != prev+1 && !(inexact && v > prev) {
				t.Fatalf("applied %d after %d without a clear or a loss: %v", v, prev, rec.trace)
			}
			prev = v
		}
		if st := r.status(); st.Inexact != inexact {
			t.Fatalf("status inexact %v, trace says %v: %v", st.Inexact, inexact, rec.trace)
		}
		if prev != int64(last) {
			t.Fatalf("last applied %d, last published %d: %v", prev, last, rec.trace)
		}
		if keep > 0 && rp.published <= uint64(keep) {
			if clears != 0 || inexact || len(rec.trace) != int(rp.published) {
				t.Fatalf("history never lost, but trace is %v", rec.trace)
			}
		}
	})
}

// engineReplayer is an engine's replay buffer holding the last keep batches.
type engineReplayer struct {
	keep      uint64
	published uint64
}

func (e *engineReplayer) publish() uint64 {
	e.published++
	return e.published - 1
}

func (e *engineReplayer) replay(_ context.Context, start uint64, fn replyFunc) error {
	lo := uint64(0)
	if e.published > e.keep {
		lo = e.published - e.keep
	}
	for seq := max(start, lo); seq < e.published; seq++ {
		if err := fn(seq, nil, seqPayload(seq)); err != nil {
			return err
		}
	}
	return nil
}

// FuzzApplierRestarts is FuzzApplier with engine restarts while the
// connection is down (the engine starts again from seq 0 with an empty cache,
// so its batches differ from the old incarnation's at the same seqs) and a
// replay buffer. Whatever the drops, reconnects and restarts, after the last
// live batch the batches applied since the last clear are consecutive and end
// at the last published seq; when the buffer still holds the current
// incarnation's whole history, they are all of that incarnation, from seq 0.
// (When the new incarnation's buffer has rolled over to start exactly at the
// old last seq + 1, a restart cannot be told from the same engine: not checked.)
func FuzzApplierRestarts(f *testing.F) {
	f.Add(uint16(10000), []byte{0, 0, 0, 3, 2, 0, 0})
	f.Add(uint16(10000), []byte{0, 0, 0, 3, 0, 0, 0, 0, 0, 2, 0})                // new incarnation past the old seq
	f.Add(uint16(10000), []byte{0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 2, 0}) // ... by one
	f.Add(uint16(3), []byte{0, 0, 3, 1, 1, 1, 1, 0, 2, 3, 3, 0})
	f.Fuzz(func(t *testing.T, keep uint16, ops []byte) {
		if keep == 0 {
			keep = 1
		}
		if len(ops) > 400 {
			ops = ops[:400]
		}
		rec := &genSink{}
		rp := &genReplayer{keep: uint64(keep)}
		r := &rank{worker: "w", sink: rec, replay: rp, seq: seqState{canReplay: true}, ctx: context.Background(),
			log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		r.onConnect()
		down := false
		for _, op := range ops {
			switch op % 4 {
			case 0: // published, and delivered unless the connection is down
				seq := rp.publish()
				if !down {
					r.onBatch(seq, nil, genPayload(seq, rp.gen))
				}
			case 1: // published, dropped on the live socket
				rp.publish()
			case 2: // the connection (drops and) comes back
				down = false
				r.onConnect()
			case 3: // the engine restarts: the connection is down until op 2
				rp.gen++
				rp.published = 0
				down = true
			}
		}
		if down {
			r.onConnect()
		}
		last := rp.publish()
		r.onBatch(last, nil, genPayload(last, rp.gen))

		since := rec.trace
		for i := len(rec.trace) - 1; i >= 0; i-- {
			if rec.trace[i].clear {
				since = rec.trace[i+1:]
				break
			}
		}
		// Batches apply in order, except once the rank is inexact (history
		// lost, blocks kept): then seqs only increase.
		whole := rp.published <= rp.keep // the buffer never lost any of this incarnation
		inexact, prev := false, -1
		var seqs []applied
		for _, a := range since {
			if a.inexact {
				inexact = true
				continue
			}
			seqs = append(seqs, a)
			if whole && a.gen != rp.gen {
				t.Fatalf("applied seq %d of incarnation %d after the last clear, current is %d: %v", a.seq, a.gen, rp.gen, rec.trace)
			}
			if prev >= 0 && a.seq != uint64(prev)+1 && !(inexact && a.seq > uint64(prev)) {
				t.Fatalf("applied %d after %d without a clear or a loss: %v", a.seq, prev, rec.trace)
			}
			prev = int(a.seq)
		}
		if whole && inexact {
			t.Fatalf("the buffer holds the whole incarnation, but the rank lost history: %v", rec.trace)
		}
		since = seqs
		if len(since) == 0 || since[len(since)-1].seq != last {
			t.Fatalf("last published %d not the last applied: %v", last, rec.trace)
		}
		if whole && since[0].seq != 0 {
			t.Fatalf("buffer holds the whole incarnation, but the rank starts at %d: %v", since[0].seq, rec.trace)
		}
	})
}

// genReplayer is an engine's replay buffer of the last keep batches of its
// current incarnation gen.
type genReplayer struct {
	keep, published uint64
	gen             byte
}

func (e *genReplayer) publish() uint64 {
	e.published++
	return e.published - 1
}

func (e *genReplayer) replay(_ context.Context, start uint64, fn replyFunc) error {
	lo := uint64(0)
	if e.published > e.keep {
		lo = e.published - e.keep
	}
	for seq := max(start, lo); seq < e.published; seq++ {
		if err := fn(seq, nil, genPayload(seq, e.gen)); err != nil {
			return err
		}
	}
	return nil
}

// genSink records applied (incarnation, seq) pairs from genPayload, and clears.
type genSink struct{ trace []applied }

type applied struct {
	clear   bool
	inexact bool // the rank became inexact (history lost, blocks kept)
	gen     byte
	seq     uint64
}

// track records the rank becoming inexact.
func (s *genSink) track(on bool) {
	if on {
		s.trace = append(s.trace, applied{inexact: true})
	}
}
func (s *genSink) trim(uint64) uint64 { return 0 }

func (s *genSink) apply(p []byte, st *batchStats) error {
	a := applied{seq: binary.BigEndian.Uint64(p)}
	if len(p) > 8 {
		a.gen = p[8]
	}
	s.trace = append(s.trace, a)
	return nil
}
func (s *genSink) reset()               { s.trace = append(s.trace, applied{clear: true}) }
func (s *genSink) cached() uint64       { return 0 }
func (s *genSink) otherRanks() []uint32 { return nil }
func (s *genSink) adopt([]uint32)       {}
