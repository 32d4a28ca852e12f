package ingest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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

// zmtpLimits bounds what one connection may cost.
type zmtpLimits struct {
	// handshake bounds the greeting and READY exchange (whole).
	handshake time.Duration
	// frame: once a message has started, every read must bring bytes
	// within this (0: no deadline; the replay client sets its own).
	frame time.Duration
	// maxMessage bounds one message (all its frames).
	maxMessage int64
}

// Handshake frames (the READY command and its metadata) are small; zmq4
// allocates whatever their header claims, so they are bounded before it
// reads them. Commands after the handshake (PING) are bounded the same way.
const maxCommandBytes = 4 << 10

// bufConn reads through a buffer for zmq4's handshake: zmq4's Conn reads
// each frame header and body with its own Read call, which on a bare
// net.Conn is a syscall each. It follows the ZMTP framing and refuses (with
// errMessageTooLarge) a frame larger than max before zmq4 sees its header:
// zmq4 allocates whatever a frame header claims (a peer announcing a
// 2^50-byte frame panics the reader, a large one exhausts memory). After the
// handshake, messages are read by zmtpConn.recv from the same buffer.
type bufConn struct {
	net.Conn
	r *bufio.Reader
	// left is how many bytes pass before the next frame header (initially
	// the 64-byte greeting); max bounds a frame.
	left, max int64
}

// zmtpGreetingLen is the length of the ZMTP 3 greeting.
const zmtpGreetingLen = 64

// errMessageTooLarge: a peer announced a message larger than allowed.
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
		if size > uint64(c.max) {
			return 0, fmt.Errorf("%w: handshake frame of %d bytes (limit %d)", errMessageTooLarge, size, c.max)
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

// progressConn sets a read deadline on every read inside a message (mid),
// so a peer that starts a message must keep sending it; between messages a
// connection may be idle (keepalive notices a dead peer).
type progressConn struct {
	net.Conn
	timeout    time.Duration // 0: no deadlines set here
	mid, armed bool
}

func (c *progressConn) Read(p []byte) (int, error) {
	switch {
	case c.timeout <= 0:
	case c.mid:
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
		c.armed = true
	case c.armed:
		_ = c.Conn.SetReadDeadline(time.Time{})
		c.armed = false
	}
	return c.Conn.Read(p)
}

// readBuffer is the size of a connection's read buffer.
const readBuffer = 64 << 10

// zmtpConn is one ZMTP connection after the handshake. zmq4 performs the
// handshake and sends (subscriptions, replay requests, PONGs); messages are
// read by recv, whose memory follows what the peer actually sent.
type zmtpConn struct {
	nc  net.Conn
	zc  *zmq4.Conn
	pc  *progressConn
	r   *bufio.Reader
	lim zmtpLimits

	frames [][]byte // recv's result, reused
	arena  []byte   // small frames are carved from it
}

// defaultLimits are a connection's limits with Config's defaults.
var defaultLimits = zmtpLimits{handshake: 5 * time.Second, maxMessage: defaultMaxMessageBytes}

// openZMTP performs the ZMTP handshake on nc as socket type typ with the
// default limits and no frame deadline.
func openZMTP(nc net.Conn, typ zmq4.SocketType, server bool) (*zmtpConn, error) {
	return handshakeZMTP(nc, typ, server, defaultLimits)
}

// handshakeZMTP performs the ZMTP handshake on nc as socket type typ, within
// lim.handshake.
func handshakeZMTP(nc net.Conn, typ zmq4.SocketType, server bool, lim zmtpLimits) (*zmtpConn, error) {
	_ = nc.SetDeadline(time.Now().Add(lim.handshake))
	pc := &progressConn{Conn: nc}
	bc := &bufConn{Conn: pc, r: bufio.NewReaderSize(pc, readBuffer), left: zmtpGreetingLen, max: maxCommandBytes}
	c, err := zmq4.Open(bc, nullSecurity{}, typ, nil, server, nil)
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	pc.timeout = lim.frame
	return &zmtpConn{nc: nc, zc: c, pc: pc, r: bc.r, lim: lim}, nil
}

// subscribe sends a ZMTP 3.0 subscription for the topic prefix.
func (c *zmtpConn) subscribe(topic []byte) error {
	frame := make([]byte, 1+len(topic))
	frame[0] = 1
	copy(frame[1:], topic)
	return c.zc.SendMsg(zmq4.NewMsg(frame))
}

// send sends one message.
func (c *zmtpConn) send(frames ...[]byte) error { return c.zc.SendMsg(zmq4.NewMsgFrom(frames...)) }

// Frames of a message beyond maxFrames are read and dropped (no message we
// accept has more); the message is then malformed.
const maxFrames = 4

// Frame memory: frames up to smallFrame bytes are carved from a shared
// arenaSize block (a topic and a seq cost no allocation of their own);
// frames over growFrom bytes start with a growFrom buffer that doubles as
// bytes arrive, so a header announcing megabytes costs nothing until they
// come.
const (
	smallFrame = 256
	arenaSize  = 8 << 10
	growFrom   = 64 << 10
)

// errStalled: a message stopped arriving part-way (lim.frame).
var errStalled = errors.New("zmtp message stalled")

// recv reads one message: its first maxFrames frames (valid until the next
// recv; their bytes are the caller's to keep), how many frames it had, and
// whether it is a command. A PING is answered. A message larger than
// lim.maxMessage (a command larger than maxCommandBytes) is
// errMessageTooLarge, one that stalls errStalled; the connection is then
// unusable.
func (c *zmtpConn) recv() (frames [][]byte, n int, cmd bool, err error) {
	c.frames = c.frames[:0]
	var total int64
	defer func() { c.pc.mid = false }()
	for more := true; more; n++ {
		flags, err := c.r.ReadByte()
		if err != nil {
			return nil, n, cmd, c.readErr(err)
		}
		c.pc.mid = true
		var size uint64
		if flags&0x2 != 0 {
			var hdr [8]byte
			if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
				return nil, n, cmd, c.readErr(err)
			}
			size = binary.BigEndian.Uint64(hdr[:])
		} else {
			b, err := c.r.ReadByte()
			if err != nil {
				return nil, n, cmd, c.readErr(err)
			}
			size = uint64(b)
		}
		cmd = cmd || flags&0x4 != 0
		more = flags&0x1 != 0 && flags&0x4 == 0
		limit := c.lim.maxMessage
		if cmd {
			limit = maxCommandBytes
		}
		if total > limit || size > uint64(limit-total) {
			return nil, n, cmd, fmt.Errorf("%w: frame of %d bytes after %d (limit %d)", errMessageTooLarge, size, total, limit)
		}
		total += int64(size)
		if n >= maxFrames {
			if _, err := c.r.Discard(int(size)); err != nil {
				return nil, n, cmd, c.readErr(err)
			}
			continue
		}
		body, err := c.body(int(size))
		if err != nil {
			return nil, n, cmd, c.readErr(err)
		}
		c.frames = append(c.frames, body)
	}
	if cmd {
		err = c.command(c.frames[0])
	}
	return c.frames, n, cmd, err
}

// readErr names a read deadline that passed inside a message.
func (c *zmtpConn) readErr(err error) error {
	if c.pc.mid && c.pc.timeout > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: no bytes for %v: %w", errStalled, c.pc.timeout, err)
	}
	return err
}

// body reads a frame body of size bytes into memory that grows as it
// arrives.
func (c *zmtpConn) body(size int) ([]byte, error) {
	if size <= smallFrame {
		if len(c.arena)+size > cap(c.arena) {
			c.arena = make([]byte, 0, arenaSize)
		}
		i := len(c.arena)
		c.arena = c.arena[:i+size]
		b := c.arena[i : i+size : i+size]
		_, err := io.ReadFull(c.r, b)
		return b, err
	}
	if size <= growFrom {
		b := make([]byte, size)
		_, err := io.ReadFull(c.r, b)
		return b, err
	}
	b := make([]byte, 0, growFrom)
	for len(b) < size {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(size, 2*cap(b)))
			copy(nb, b)
			b = nb
		}
		n, err := c.r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil && len(b) < size {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}

// command answers a PING (ZMTP 3.1: name, a 2-byte TTL, a context the PONG
// echoes); other commands carry nothing for a subscriber.
func (c *zmtpConn) command(body []byte) error {
	if len(body) == 0 || int(body[0]) > len(body)-1 {
		return nil
	}
	name, rest := string(body[1:1+int(body[0])]), body[1+int(body[0]):]
	if name != zmq4.CmdPing {
		return nil
	}
	var ctx []byte
	if len(rest) > 2 {
		ctx = rest[2:]
	}
	if c.lim.frame > 0 {
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.lim.frame))
		defer c.nc.SetWriteDeadline(time.Time{})
	}
	return c.zc.SendCmd(zmq4.CmdPong, ctx)
}

// Message size: Config.MaxMessageBytes bounds one received message.
const defaultMaxMessageBytes = 16 << 20
