package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/scoring"
)

// A load message is a batch of changes from one replica:
//
//	magic 'K' 'L', version 1, kind (1 changes, 2 state part)
//	uvarint len + origin replica id
//	uvarint epoch   (the origin's start; a new one means a new process)
//	uvarint seq     (per origin and epoch, one more for every changes message)
//	flags byte: 1 digest follows, 2 last state part
//	[uvarint count, 8-byte little-endian sum]  the origin's LoadDigest("")
//	uvarint number of changes, then each change:
//	  kind byte (scoring.ChangeKind), uvarint len + request id
//	  for a route: uvarint len + worker id, uvarint dp rank,
//	    uvarint prefill blocks, prefill tokens, decode blocks,
//	    flags byte (1 prefill done), uvarint ttl ms (0: the full TTL),
//	    uvarint n + n 8-byte little-endian predicted keys
//
// Integers are unsigned varints; a negative load is refused. Strings are
// bounded by maxString; every count is checked against the bytes left, so
// a decoder allocates no more than the message's size.

const (
	magic0, magic1 = 'K', 'L'
	codecVersion   = 1

	kindChanges = 1
	kindState   = 2

	flagDigest   = 1
	flagLastPart = 2

	changeFlagPrefillDone = 1

	maxString = 1 << 16
)

// Header is a load message's header.
type Header struct {
	Kind   byte // kindChanges or kindState
	Origin string
	Epoch  uint64
	Seq    uint64
	// Digest, when HasDigest, is the origin's own requests at Seq.
	HasDigest bool
	Digest    Digest
	// Last marks the last part of a state reply.
	Last bool
}

// Digest sums a replica's own active requests (scoring.Router.LoadDigest).
type Digest struct {
	Count uint64
	Sum   uint64
}

// appendHeader appends h and the change count n.
func appendHeader(b []byte, h *Header, n int) []byte {
	b = append(b, magic0, magic1, codecVersion, h.Kind)
	b = appendString(b, h.Origin)
	b = binary.AppendUvarint(b, h.Epoch)
	b = binary.AppendUvarint(b, h.Seq)
	var flags byte
	if h.HasDigest {
		flags |= flagDigest
	}
	if h.Last {
		flags |= flagLastPart
	}
	b = append(b, flags)
	if h.HasDigest {
		b = binary.AppendUvarint(b, h.Digest.Count)
		b = binary.LittleEndian.AppendUint64(b, h.Digest.Sum)
	}
	return binary.AppendUvarint(b, uint64(n))
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendChange appends one change.
func appendChange(b []byte, c *scoring.LoadChange) []byte {
	b = append(b, byte(c.Kind))
	b = appendString(b, c.RequestID)
	if c.Kind != scoring.ChangeRoute {
		return b
	}
	b = appendString(b, c.WorkerID)
	b = binary.AppendUvarint(b, uint64(c.DPRank))
	b = binary.AppendUvarint(b, uint64(max(c.PrefillBlocks, 0)))
	b = binary.AppendUvarint(b, uint64(max(c.PrefillTokens, 0)))
	b = binary.AppendUvarint(b, uint64(max(c.DecodeBlocks, 0)))
	var flags byte
	if c.PrefillDone {
		flags |= changeFlagPrefillDone
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(c.TTL/time.Millisecond))
	b = binary.AppendUvarint(b, uint64(len(c.Predicted)))
	for _, k := range c.Predicted {
		b = binary.LittleEndian.AppendUint64(b, k)
	}
	return b
}

// ErrMalformed is a load message that does not decode.
var ErrMalformed = errors.New("malformed load message")

// decoder reads a load message.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at byte %d", ErrMalformed, what, d.off)
	}
}

func (d *decoder) byte(what string) byte {
	if d.err != nil || d.off >= len(d.b) {
		d.fail(what)
		return 0
	}
	d.off++
	return d.b[d.off-1]
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) int64(what string) int64 {
	v := d.uvarint(what)
	if v > 1<<62 {
		d.fail(what + " out of range")
		return 0
	}
	return int64(v)
}

func (d *decoder) string(what string) string {
	n := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if n > maxString || n > uint64(len(d.b)-d.off) {
		d.fail(what + " length")
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}

func (d *decoder) uint64le(what string) uint64 {
	if d.err != nil || len(d.b)-d.off < 8 {
		d.fail(what)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

// DecodeHeader reads a message's header; the changes follow at the
// returned decoder's position, count of them.
func decodeHeader(b []byte) (*decoder, Header, int, error) {
	d := &decoder{b: b}
	var h Header
	if d.byte("magic") != magic0 || d.byte("magic") != magic1 {
		d.fail("magic")
		return d, h, 0, d.err
	}
	if v := d.byte("version"); d.err == nil && v != codecVersion {
		return d, h, 0, fmt.Errorf("%w: version %d, want %d", ErrMalformed, v, codecVersion)
	}
	h.Kind = d.byte("kind")
	if d.err == nil && h.Kind != kindChanges && h.Kind != kindState {
		d.fail(fmt.Sprintf("kind %d", h.Kind))
	}
	h.Origin = d.string("origin")
	h.Epoch = d.uvarint("epoch")
	h.Seq = d.uvarint("seq")
	flags := d.byte("flags")
	h.HasDigest, h.Last = flags&flagDigest != 0, flags&flagLastPart != 0
	if h.HasDigest {
		h.Digest.Count = d.uvarint("digest count")
		h.Digest.Sum = d.uint64le("digest sum")
	}
	n := d.uvarint("change count")
	// A change takes two bytes at least.
	if d.err == nil && n > uint64(len(b)-d.off)/2 {
		d.fail("change count")
	}
	return d, h, int(n), d.err
}

// next reads one change into c; c.Predicted reuses its backing array.
func (d *decoder) next(c *scoring.LoadChange) error {
	*c = scoring.LoadChange{Predicted: c.Predicted[:0]}
	c.Kind = scoring.ChangeKind(d.byte("change kind"))
	c.RequestID = d.string("request id")
	switch {
	case d.err != nil:
		return d.err
	case c.Kind == scoring.ChangePrefillDone || c.Kind == scoring.ChangeFinished:
		if c.RequestID == "" {
			d.fail("mark without a request id")
		}
		return d.err
	case c.Kind != scoring.ChangeRoute:
		d.fail(fmt.Sprintf("change kind %d", c.Kind))
		return d.err
	}
	c.WorkerID = d.string("worker id")
	c.DPRank = d.rank("dp rank")
	c.PrefillBlocks = d.int64("prefill blocks")
	c.PrefillTokens = d.int64("prefill tokens")
	c.DecodeBlocks = d.int64("decode blocks")
	c.PrefillDone = d.byte("change flags")&changeFlagPrefillDone != 0
	ttl := d.uvarint("ttl")
	if ttl > uint64(365*24*time.Hour/time.Millisecond) {
		d.fail("ttl")
	}
	c.TTL = time.Duration(ttl) * time.Millisecond
	n := d.uvarint("predicted count")
	if d.err == nil && n > uint64(len(d.b)-d.off)/8 {
		d.fail("predicted count")
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		c.Predicted = append(c.Predicted, d.uint64le("predicted key"))
	}
	return d.err
}

// Message is a decoded load message, for tests and tools.
type Message struct {
	Header  Header
	Changes []scoring.LoadChange
}

// DecodeMessage decodes a whole load message.
func DecodeMessage(b []byte) (Message, error) {
	d, h, n, err := decodeHeader(b)
	m := Message{Header: h}
	if err != nil {
		return m, err
	}
	for range n {
		var c scoring.LoadChange
		if err := d.next(&c); err != nil {
			return m, err
		}
		m.Changes = append(m.Changes, c)
	}
	if d.off != len(b) {
		return m, fmt.Errorf("%w: %d bytes after the last change", ErrMalformed, len(b)-d.off)
	}
	return m, nil
}

// EncodeMessage encodes m.
func EncodeMessage(m Message) []byte {
	b := appendHeader(nil, &m.Header, len(m.Changes))
	for i := range m.Changes {
		b = appendChange(b, &m.Changes[i])
	}
	return b
}
