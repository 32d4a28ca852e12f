package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-zeromq/zmq4"
)

// replayer asks the engine for its buffered batches from start on, calling
// fn for each (with the reply's topic, nil when the reply has none), up to
// the end marker. An error from fn ends the replay and is returned (wrapped).
type replayer interface {
	replay(ctx context.Context, start uint64, fn replyFunc) error
}

// replyFunc receives one replayed batch.
type replyFunc func(seq uint64, topic, payload []byte) error

// errReplayOrder marks a replay whose seqs do not strictly increase: a peer
// repeating or reordering batches (possibly forever) is cut off.
var errReplayOrder = errors.New("replay seqs out of order")

// endSeq is the replay end marker: seq -1.
const endSeq = ^uint64(0)

// errReplayMalformed marks a replay reply that is neither reply shape.
var errReplayMalformed = errors.New("malformed replay reply")

// replayClient asks an engine's ROUTER replay socket for buffered batches.
type replayClient struct {
	ep      Endpoint
	dialer  *net.Dialer
	timeout time.Duration // per-reply idle timeout
	lim     zmtpLimits    // handshake and message size (the reply deadline is timeout)
}

// replay sends ["", start] on a fresh DEALER connection and calls fn for
// every buffered batch up to the end marker. It accepts both reply shapes:
// ["", seq, payload] and ["", topic, seq, payload]. It returns when the end
// marker arrives, fn fails, a reply is malformed, a reply does not arrive in
// time, or ctx ends.
func (rc *replayClient) replay(ctx context.Context, start uint64, fn replyFunc) error {
	nc, err := rc.dialer.DialContext(ctx, rc.ep.network(), rc.ep.Address)
	if err != nil {
		return fmt.Errorf("replay dial %s: %w", rc.ep, err)
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()

	lim := rc.lim
	if lim.handshake <= 0 {
		lim.handshake = rc.timeout
	}
	if lim.maxMessage <= 0 {
		lim.maxMessage = defaultMaxMessageBytes
	}
	lim.frame = 0 // each reply has its own deadline
	c, err := handshakeZMTP(nc, zmq4.Dealer, false, lim)
	if err != nil {
		return fmt.Errorf("replay handshake %s: %w", rc.ep, err)
	}
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], start)
	_ = nc.SetWriteDeadline(time.Now().Add(rc.timeout))
	if err := c.send([]byte{}, req[:]); err != nil {
		return fmt.Errorf("replay request %s: %w", rc.ep, err)
	}
	for {
		_ = nc.SetReadDeadline(time.Now().Add(rc.timeout))
		f, n, cmd, err := c.recv()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("replay recv %s: %w", rc.ep, err)
		}
		if cmd {
			continue
		}
		var topic, seqFrame, payload []byte
		switch {
		case n == 3 && len(f[0]) == 0:
			seqFrame, payload = f[1], f[2]
		case n == 4 && len(f[0]) == 0:
			topic, seqFrame, payload = f[1], f[2], f[3]
		default:
			return fmt.Errorf("replay %s: %w: %d frames", rc.ep, errReplayMalformed, n)
		}
		if len(seqFrame) != 8 {
			return fmt.Errorf("replay %s: %w: seq frame of %d bytes", rc.ep, errReplayMalformed, len(seqFrame))
		}
		seq := binary.BigEndian.Uint64(seqFrame)
		if seq == endSeq {
			return nil
		}
		if err := fn(seq, topic, payload); err != nil {
			return fmt.Errorf("replay %s: %w", rc.ep, err)
		}
	}
}
