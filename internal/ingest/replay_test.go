package ingest

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// replayPeer is a misbehaving engine replay socket: a ZMTP ROUTER on
// loopback that answers each request with the given replies, as frames
// after the (implicit) identity, then stops sending (no end marker unless
// the script has one).
func replayPeer(t *testing.T, replies [][][]byte) Endpoint {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	go func() {
		defer close(done)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			func() {
				defer nc.Close()
				c, err := openZMTP(nc, zmq4.Router, true)
				if err != nil {
					return
				}
				if _, _, _, err := c.recv(); err != nil {
					return
				}
				for _, f := range replies {
					if err := c.send(f...); err != nil {
						return
					}
				}
				// Hold the connection until the client gives up or the test ends.
				for {
					if _, _, _, err := c.recv(); err != nil {
						return
					}
				}
			}()
		}
	}()
	return Endpoint{Transport: "tcp", Address: ln.Addr().String()}
}

func seqB(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// TestReplayPeerMisbehaves drives a rank's catch-up against replay peers that
// reorder, repeat, garble or never end their replies: each must end the
// replay with a counted failure and leave the rank applying in order, never
// loop forever or apply a batch twice.
func TestReplayPeerMisbehaves(t *testing.T) {
	end := [][]byte{{}, seqB(endSeq), {}}
	rep := func(seq uint64) [][]byte { return [][]byte{{}, seqB(seq), seqPayload(seq)} }
	rep4 := func(seq uint64) [][]byte { return [][]byte{{}, []byte("topic"), seqB(seq), seqPayload(seq)} }
	for _, tc := range []struct {
		name      string
		replies   [][][]byte
		wantTrace string
		wantFail  uint64
		wantErr   string // in the replay's error, when it fails
	}{
		{name: "well behaved, both shapes", replies: [][][]byte{rep(0), rep4(1), rep(2), end},
			wantTrace: "0 1 2"},
		{name: "seq goes back", replies: [][][]byte{rep(0), rep(1), rep(0), rep(2), end},
			wantTrace: "0 1", wantFail: 1, wantErr: "out of order"},
		{name: "seq repeated", replies: [][][]byte{rep(0), rep(1), rep(1), rep(1), rep(1), end},
			wantTrace: "0 1", wantFail: 1, wantErr: "out of order"},
		{name: "garbage frames", replies: [][][]byte{rep(0), {[]byte("x")}, rep(1), end},
			wantTrace: "0", wantFail: 1, wantErr: "malformed"},
		{name: "short seq frame", replies: [][][]byte{rep(0), {{}, {1, 2}, {}}, end},
			wantTrace: "0", wantFail: 1, wantErr: "malformed"},
		{name: "no end marker", replies: [][][]byte{rep(0), rep(1)},
			wantTrace: "0 1", wantFail: 1, wantErr: "replay recv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := replayPeer(t, tc.replies)
			rec := &recordSink{}
			var errs []string
			r := &rank{worker: "w", sink: rec, ctx: context.Background(), seq: seqState{canReplay: true},
				log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				replay: &errRecorder{
					replayer: &replayClient{ep: ep, dialer: &net.Dialer{Timeout: waitFor}, timeout: 300 * time.Millisecond},
					errs:     &errs,
				}}
			r.onConnect()
			if got := strings.Join(rec.trace, " "); got != tc.wantTrace {
				t.Errorf("trace %q, want %q", got, tc.wantTrace)
			}
			if got := r.replayFailures.Load(); got != tc.wantFail {
				t.Errorf("replay failures %d, want %d (errors %q)", got, tc.wantFail, errs)
			}
			if tc.wantErr != "" && (len(errs) != 1 || !strings.Contains(errs[0], tc.wantErr)) {
				t.Errorf("replay errors %q, want one containing %q", errs, tc.wantErr)
			}
			// The live stream carries on in order: the next batch applies,
			// a copy of one the replay applied does not.
			next := uint64(len(rec.trace))
			if next > 0 {
				r.onBatch(next-1, nil, seqPayload(next-1))
			}
			r.onBatch(next, nil, seqPayload(next))
			want := strings.TrimSpace(tc.wantTrace + " " + seqString(next))
			if got := strings.Join(rec.trace, " "); got != want {
				t.Errorf("after live batches: trace %q, want %q", got, want)
			}
		})
	}
}

func seqString(seq uint64) string { return strconv.FormatUint(seq, 10) }

// errRecorder records the errors a replayer returns.
type errRecorder struct {
	replayer
	errs *[]string
}

func (e *errRecorder) replay(ctx context.Context, start uint64, fn replyFunc) error {
	err := e.replayer.replay(ctx, start, fn)
	if err != nil {
		*e.errs = append(*e.errs, err.Error())
	}
	return err
}

// TestStopDuringGapReplay: a rank stopped (Remove, Close) while it replays a
// gap neither clears its index state nor counts a lost history: the replay
// did not fail, it was abandoned.
func TestStopDuringGapReplay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &recordSink{}
	rp := &cancelReplayer{hi: 1, cancel: cancel}
	r := &rank{worker: "w", sink: rec, ctx: ctx, replay: rp, seq: seqState{canReplay: true},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	r.onConnect() // applies 0 and 1
	rp.cancelNext = true
	r.onBatch(5, nil, seqPayload(5)) // a gap: the replay is cut short by the stop
	if got := strings.Join(rec.trace, " "); got != "0 1" {
		t.Errorf("trace %q, want %q (nothing cleared or applied after the stop)", got, "0 1")
	}
	if got := r.replayFailures.Load(); got != 0 {
		t.Errorf("replay failures %d, want 0", got)
	}
}

// cancelReplayer serves seqs 0..hi; with cancelNext, the next replay stops
// the rank (cancel) and returns the context's error, as a replay does when
// the rank stops under it.
type cancelReplayer struct {
	hi         uint64
	cancel     context.CancelFunc
	cancelNext bool
}

func (c *cancelReplayer) replay(ctx context.Context, start uint64, fn replyFunc) error {
	if c.cancelNext {
		c.cancel()
		return ctx.Err()
	}
	for seq := start; seq <= c.hi; seq++ {
		if err := fn(seq, nil, seqPayload(seq)); err != nil {
			return err
		}
	}
	return nil
}
