package ingest

import (
	"context"
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
			r.replay = rp
		}
		r.onConnect()
		for _, op := range ops {
			switch op % 3 {
			case 0: // published and delivered
				r.live(rp.publish(), seqPayload(rp.published-1))
			case 1: // published, dropped on the live socket
				rp.publish()
			case 2: // the connection drops and comes back
				r.onConnect()
			}
		}
		last := rp.publish()
		r.live(last, seqPayload(last))

		var prev int64 = -1
		clears := 0
		for _, tok := range rec.trace {
			if tok == "clear" {
				prev = -1
				clears++
				continue
			}
			v, _ := strconv.ParseInt(tok, 10, 64)
			if prev >= 0 && v != prev+1 {
				t.Fatalf("applied %d after %d without a clear: %v", v, prev, rec.trace)
			}
			prev = v
		}
		if prev != int64(last) {
			t.Fatalf("last applied %d, last published %d: %v", prev, last, rec.trace)
		}
		if keep > 0 && rp.published <= uint64(keep) {
			if clears != 0 || len(rec.trace) != int(rp.published) {
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

func (e *engineReplayer) replay(_ context.Context, start uint64, fn func(uint64, []byte) error) error {
	lo := uint64(0)
	if e.published > e.keep {
		lo = e.published - e.keep
	}
	for seq := max(start, lo); seq < e.published; seq++ {
		if err := fn(seq, seqPayload(seq)); err != nil {
			return err
		}
	}
	return nil
}
