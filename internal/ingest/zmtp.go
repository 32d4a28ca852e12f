package ingest

import (
	"bufio"
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
	// zmq4's parser indexes past the end of a malformed body (a panic):
	// check the layout first.
	if err := checkMetadata(cmd.Body); err != nil {
		return fmt.Errorf("peer metadata: %w", err)
	}
	if err := conn.Peer.Meta.UnmarshalZMTP(cmd.Body); err != nil {
		return fmt.Errorf("peer metadata: %w", err)
	}
	return nil
}

// checkMetadata checks that p is a sequence of ZMTP properties: a 1-byte name
// length and name, then a 4-byte big-endian value length and value.
func checkMetadata(p []byte) error {
	for i := 0; i < len(p); {
		klen := int(p[i])
		i++
		if klen > len(p)-i || 4 > len(p)-i-klen {
			return fmt.Errorf("property at byte %d: truncated name or value length", i-1)
		}
		i += klen
		vlen := binary.BigEndian.Uint32(p[i:])
		i += 4
		if uint64(vlen) > uint64(len(p)-i) {
			return fmt.Errorf("property value at byte %d: %d bytes, %d left", i, vlen, len(p)-i)
		}
		i += int(vlen)
	}
	return nil
}

func (nullSecurity) Encrypt(w io.Writer, data []byte) (int, error) { return w.Write(data) }
func (nullSecurity) Decrypt(w io.Writer, data []byte) (int, error) { return w.Write(data) }

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
//
// It also follows the ZMTP framing and refuses (with errMessageTooLarge) a
// frame header that would make a message exceed maxMessageBytes, before zmq4
// sees it: zmq4 allocates whatever a frame header claims (a peer announcing
// a 2^50-byte frame panics the reader, a large one exhausts memory) and
// gathers any number of MORE frames into one message.
type bufConn struct {
	net.Conn
	r *bufio.Reader
	// left is how many bytes pass before the next frame header (initially
	// the 64-byte greeting); msg is the size of the message's frames so far.
	left, msg int64
}

// zmtpGreetingLen is the length of the ZMTP 3 greeting.
const zmtpGreetingLen = 64

// errMessageTooLarge: a peer announced a message larger than maxMessageBytes.
var errMessageTooLarge = errors.New("zmtp message too large")

func (c *bufConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.left == 0 {
		// At a frame header: flags, then a 1-byte or (long) 8-byte size.
		hdr, err := c.r.Peek(2)
		if err != nil {
			return 0, err
		}
		flags, hl, size := hdr[0], int64(2), uint64(hdr[1])
		if flags&0x2 != 0 {
			if hdr, err = c.r.Peek(9); err != nil {
				return 0, err
			}
			hl, size = 9, binary.BigEndian.Uint64(hdr[1:9])
		}
		if size > uint64(maxMessageBytes-c.msg) {
			return 0, fmt.Errorf("%w: frame of %d bytes after %d (limit %d)", errMessageTooLarge, size, c.msg, maxMessageBytes)
		}
		c.msg += int64(size)
		if flags&0x1 == 0 || flags&0x4 != 0 { // last frame, or a command
			c.msg = 0
		}
		c.left = hl + int64(size)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// readBuffer is the size of a connection's read buffer.
const readBuffer = 64 << 10

// openZMTP performs the ZMTP handshake on nc as socket type typ. The returned
// Conn reads through a buffer.
func openZMTP(nc net.Conn, typ zmq4.SocketType, server bool) (*zmq4.Conn, error) {
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	bc := &bufConn{Conn: nc, r: bufio.NewReaderSize(nc, readBuffer), left: zmtpGreetingLen}
	c, err := zmq4.Open(bc, nullSecurity{}, typ, nil, server, nil)
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

// maxMessageBytes bounds one received ZMTP message (all its frames).
var maxMessageBytes int64 = 64 << 20
