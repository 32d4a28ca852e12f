package ingest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/go-zeromq/zmq4"
)

// The subscriber speaks ZMTP through go-zeromq's connection layer
// (zmq4.Open on a net.Conn it owns) rather than through zmq4's Socket type:
// the Socket type hides whether a peer is connected, its automatic reconnect
// redials from inside the connection's close callback (data race on the
// socket's endpoint, and a Close that races with it), and its per-connection
// reader goroutine blocks forever on a full channel when the socket is closed
// under load. Owning the net.Conn gives an exact Connected state, TCP
// keepalive to notice dead peers, read deadlines for replay, and a Close that
// always returns. The peer still sees a ZMTP 3.0 SUB (or DEALER) socket.

// nullSecurity is ZMTP's NULL mechanism (zmq4 does not export its own).
type nullSecurity struct{}

func (nullSecurity) Type() zmq4.SecurityType { return zmq4.NullSecurity }

func (nullSecurity) Handshake(conn *zmq4.Conn, server bool) error {
	raw, err := conn.Meta.MarshalZMTP()
	if err != nil {
		return fmt.Errorf("marshal metadata: %w", err)
	}
	if err := conn.SendCmd(zmq4.CmdReady, raw); err != nil {
		return fmt.Errorf("send READY: %w", err)
	}
	cmd, err := conn.RecvCmd()
	if err != nil {
		return fmt.Errorf("recv READY: %w", err)
	}
	if cmd.Name != zmq4.CmdReady {
		return fmt.Errorf("peer sent %q, want READY", cmd.Name)
	}
	if err := conn.Peer.Meta.UnmarshalZMTP(cmd.Body); err != nil {
		return fmt.Errorf("peer metadata: %w", err)
	}
	return nil
}

func (nullSecurity) Encrypt(w io.Writer, data []byte) (int, error) { return w.Write(data) }
func (nullSecurity) Decrypt(w io.Writer, data []byte) (int, error) { return w.Write(data) }

// endSeq is the replay end marker: seq -1.
const endSeq = ^uint64(0)

// handshakeTimeout bounds the ZMTP greeting and READY exchange.
const handshakeTimeout = 5 * time.Second

// dialer returns a dialer with TCP keepalive tuned to notice a dead peer in
// roughly idle + 3*interval.
func newDialer(timeout, keepAlive time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout: timeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     keepAlive,
			Interval: keepAlive / 2,
			Count:    3,
		},
	}
}

// bufConn reads through a buffer: zmq4's Conn reads each frame header and
// body with its own Read call, which on a bare net.Conn is a syscall each.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// readBuffer is the size of a connection's read buffer.
const readBuffer = 64 << 10

// openZMTP performs the ZMTP handshake on nc as socket type typ. The returned
// Conn reads through a buffer.
func openZMTP(nc net.Conn, typ zmq4.SocketType, server bool) (*zmq4.Conn, error) {
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	c, err := zmq4.Open(&bufConn{Conn: nc, r: bufio.NewReaderSize(nc, readBuffer)}, nullSecurity{}, typ, nil, server, nil)
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// subscribe sends a ZMTP 3.0 subscription for the topic prefix.
func subscribe(c *zmq4.Conn, topic []byte) error {
	frame := make([]byte, 1+len(topic))
	frame[0] = 1
	copy(frame[1:], topic)
	return c.SendMsg(zmq4.NewMsg(frame))
}

// errReplayMalformed marks a replay reply that is neither reply shape.
var errReplayMalformed = errors.New("malformed replay reply")

// replayClient asks an engine's ROUTER replay socket for buffered batches.
type replayClient struct {
	ep      Endpoint
	dialer  *net.Dialer
	timeout time.Duration // per-reply idle timeout
}

// replay sends ["", start] on a fresh DEALER connection and calls fn for
// every buffered batch up to the end marker. It accepts both reply shapes:
// ["", seq, payload] and ["", topic, seq, payload]. It returns when the end
// marker arrives, fn fails, a reply is malformed, a reply does not arrive in
// time, or ctx ends.
func (rc *replayClient) replay(ctx context.Context, start uint64, fn func(seq uint64, payload []byte) error) error {
	nc, err := rc.dialer.DialContext(ctx, rc.ep.network(), rc.ep.Address)
	if err != nil {
		return fmt.Errorf("replay dial %s: %w", rc.ep, err)
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()

	c, err := openZMTP(nc, zmq4.Dealer, false)
	if err != nil {
		return fmt.Errorf("replay handshake %s: %w", rc.ep, err)
	}
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], start)
	_ = nc.SetWriteDeadline(time.Now().Add(rc.timeout))
	if err := c.SendMsg(zmq4.NewMsgFrom([]byte{}, req[:])); err != nil {
		return fmt.Errorf("replay request %s: %w", rc.ep, err)
	}
	for {
		_ = nc.SetReadDeadline(time.Now().Add(rc.timeout))
		msg, err := c.RecvMsg()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("replay recv %s: %w", rc.ep, err)
		}
		if msg.Type == zmq4.CmdMsg {
			continue
		}
		f := msg.Frames
		var seqFrame, payload []byte
		switch {
		case len(f) == 3 && len(f[0]) == 0:
			seqFrame, payload = f[1], f[2]
		case len(f) == 4 && len(f[0]) == 0:
			seqFrame, payload = f[2], f[3]
		default:
			return fmt.Errorf("replay %s: %w: %d frames", rc.ep, errReplayMalformed, len(f))
		}
		if len(seqFrame) != 8 {
			return fmt.Errorf("replay %s: %w: seq frame of %d bytes", rc.ep, errReplayMalformed, len(seqFrame))
		}
		seq := binary.BigEndian.Uint64(seqFrame)
		if seq == endSeq {
			return nil
		}
		if err := fn(seq, payload); err != nil {
			return fmt.Errorf("replay %s: %w", rc.ep, err)
		}
	}
}
