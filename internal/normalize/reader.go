package normalize

import (
	"encoding/binary"
	"fmt"
	"math"
)

// A small zero-copy msgpack reader for the decode hot path. It reads values
// in place from one payload, never allocates for strings or binaries (they are
// returned as sub-slices of the payload), and validates nesting iteratively so
// that no input can exhaust the stack. FuzzDifferential checks it against
// github.com/shamaton/msgpack/v2 on the same bytes.

// mtype is the kind of a msgpack value.
type mtype uint8

const (
	mInvalid mtype = iota // never-used code 0xc1, or past the end
	mNil
	mBool
	mUint // positive integer
	mInt  // negative integer
	mFloat
	mStr
	mBin
	mArray
	mMap
	mExt
)

var mtypeNames = [...]string{"invalid", "nil", "bool", "int", "int", "float", "str", "bin", "array", "map", "ext"}

func (t mtype) String() string { return mtypeNames[t] }

// typeOf returns the kind of a value starting with code c.
func typeOf(c byte) mtype {
	switch {
	case c <= 0x7f:
		return mUint
	case c <= 0x8f:
		return mMap
	case c <= 0x9f:
		return mArray
	case c <= 0xbf:
		return mStr
	case c >= 0xe0:
		return mInt
	}
	switch c {
	case 0xc0:
		return mNil
	case 0xc2, 0xc3:
		return mBool
	case 0xc4, 0xc5, 0xc6:
		return mBin
	case 0xc7, 0xc8, 0xc9, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return mExt
	case 0xca, 0xcb:
		return mFloat
	case 0xcc, 0xcd, 0xce, 0xcf:
		return mUint
	case 0xd0, 0xd1, 0xd2, 0xd3:
		return mInt
	case 0xd9, 0xda, 0xdb:
		return mStr
	case 0xdc, 0xdd:
		return mArray
	case 0xde, 0xdf:
		return mMap
	}
	return mInvalid
}

// structError is a structural error: the payload is not valid msgpack at
// that offset, so nothing after it can be read.
type structError struct {
	off int
	msg string
}

func (e *structError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.off) }

// typeError is a well-formed value of the wrong kind.
type typeError struct {
	off  int
	want string
	got  mtype
}

func (e *typeError) Error() string {
	return fmt.Sprintf("want %s, got %s at byte %d", e.want, e.got, e.off)
}

// valueError is a well-typed value that is out of range.
type valueError struct {
	off int
	msg string
}

func (e *valueError) Error() string { return e.msg }

// isStructural reports whether err means the payload is not valid msgpack.
func isStructural(err error) bool {
	_, ok := err.(*structError)
	return ok
}

// reader reads msgpack values from b starting at off.
type reader struct {
	b     []byte
	off   int
	stack []skipFrame // reused by skip
}

type skipFrame struct {
	left    int  // values left in this container
	isMap   bool // keys and values alternate
	wantKey bool // next value is a map key
}

func (r *reader) truncated() error { return &structError{r.off, "truncated msgpack"} }

// peek returns the kind of the next value without consuming it.
func (r *reader) peek() mtype {
	if r.off >= len(r.b) {
		return mInvalid
	}
	return typeOf(r.b[r.off])
}

// has reports whether n more bytes are available at off.
func (r *reader) has(n int) bool { return n >= 0 && len(r.b)-r.off >= n }

func (r *reader) be16(at int) int { return int(binary.BigEndian.Uint16(r.b[at:])) }
func (r *reader) be32(at int) int { return int(binary.BigEndian.Uint32(r.b[at:])) }

// header reads the header of the next value and returns its kind and, for
// containers, strings, binaries and extensions, its length (the element count
// for arrays, the pair count for maps, the byte count otherwise, excluding an
// extension's type byte). The header bytes are consumed; payload bytes are not.
func (r *reader) header() (mtype, int, error) {
	if r.off >= len(r.b) {
		return mInvalid, 0, r.truncated()
	}
	c := r.b[r.off]
	t := typeOf(c)
	var hdr, n int
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		hdr = 1
	case c <= 0x8f:
		hdr, n = 1, int(c&0x0f)
	case c <= 0x9f:
		hdr, n = 1, int(c&0x0f)
	case c <= 0xbf:
		hdr, n = 1, int(c&0x1f)
	default:
		switch c {
		case 0xcc, 0xd0:
			hdr, n = 1, 1
		case 0xcd, 0xd1:
			hdr, n = 1, 2
		case 0xce, 0xd2, 0xca:
			hdr, n = 1, 4
		case 0xcf, 0xd3, 0xcb:
			hdr, n = 1, 8
		case 0xc4, 0xd9:
			if !r.has(2) {
				return t, 0, r.truncated()
			}
			hdr, n = 2, int(r.b[r.off+1])
		case 0xc5, 0xda, 0xdc, 0xde:
			if !r.has(3) {
				return t, 0, r.truncated()
			}
			hdr, n = 3, r.be16(r.off+1)
		case 0xc6, 0xdb, 0xdd, 0xdf:
			if !r.has(5) {
				return t, 0, r.truncated()
			}
			hdr, n = 5, r.be32(r.off+1)
		case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
			hdr, n = 1, 1<<(c-0xd4)+1
		case 0xc7:
			if !r.has(2) {
				return t, 0, r.truncated()
			}
			hdr, n = 2, int(r.b[r.off+1])+1
		case 0xc8:
			if !r.has(3) {
				return t, 0, r.truncated()
			}
			hdr, n = 3, r.be16(r.off+1)+1
		case 0xc9:
			if !r.has(5) {
				return t, 0, r.truncated()
			}
			hdr, n = 5, r.be32(r.off+1)+1
		default:
			return mInvalid, 0, &structError{r.off, fmt.Sprintf("invalid msgpack code 0x%02x", c)}
		}
	}
	if !r.has(hdr) {
		return t, 0, r.truncated()
	}
	r.off += hdr
	return t, n, nil
}

// skip consumes one complete value, checking that it is well formed: not
// truncated, no never-used code, no extension types and no array or map used
// as a map key (the two things github.com/shamaton/msgpack/v2 rejects too).
func (r *reader) skip() error {
	return r.skipLoop(append(r.stack[:0], skipFrame{left: 1}))
}

// skipLoop walks nested containers with an explicit stack (kept in r.stack
// for the next skip), so that deep nesting cannot exhaust the goroutine's.
func (r *reader) skipLoop(st []skipFrame) error {
	defer func() { r.stack = st[:0] }()
	for len(st) > 0 {
		top := &st[len(st)-1]
		if top.left == 0 {
			st = st[:len(st)-1]
			continue
		}
		top.left--
		isKey := top.isMap && top.wantKey
		if top.isMap {
			top.wantKey = !top.wantKey
		}
		start := r.off
		t, n, err := r.header()
		if err != nil {
			return err
		}
		switch t {
		case mArray, mMap:
			if isKey {
				return &structError{start, "map key is " + t.String()}
			}
			if t == mMap {
				if n > (len(r.b)-r.off)/2 {
					return &structError{start, "truncated msgpack"}
				}
				st = append(st, skipFrame{left: 2 * n, isMap: true, wantKey: true})
			} else {
				if n > len(r.b)-r.off {
					return &structError{start, "truncated msgpack"}
				}
				st = append(st, skipFrame{left: n})
			}
		case mExt:
			return &structError{start, "msgpack extension types are not supported"}
		default:
			if !r.has(n) {
				r.off = start
				return &structError{start, "truncated msgpack"}
			}
			r.off += n
		}
	}
	return nil
}

// readInt reads an integer. It returns its two's-complement bits and whether
// it is negative.
func (r *reader) readInt() (u uint64, neg bool, err error) {
	if r.off >= len(r.b) {
		return 0, false, r.truncated()
	}
	c := r.b[r.off]
	switch {
	case c <= 0x7f:
		r.off++
		return uint64(c), false, nil
	case c >= 0xe0:
		r.off++
		return uint64(int64(int8(c))), true, nil
	}
	var n int
	switch c {
	case 0xcc, 0xd0:
		n = 1
	case 0xcd, 0xd1:
		n = 2
	case 0xce, 0xd2:
		n = 4
	case 0xcf, 0xd3:
		n = 8
	default:
		return 0, false, &typeError{r.off, "int", typeOf(c)}
	}
	if !r.has(1 + n) {
		return 0, false, r.truncated()
	}
	p := r.b[r.off+1 : r.off+1+n]
	r.off += 1 + n
	switch c {
	case 0xcc:
		return uint64(p[0]), false, nil
	case 0xcd:
		return uint64(binary.BigEndian.Uint16(p)), false, nil
	case 0xce:
		return uint64(binary.BigEndian.Uint32(p)), false, nil
	case 0xcf:
		return binary.BigEndian.Uint64(p), false, nil
	case 0xd0:
		v := int64(int8(p[0]))
		return uint64(v), v < 0, nil
	case 0xd1:
		v := int64(int16(binary.BigEndian.Uint16(p)))
		return uint64(v), v < 0, nil
	case 0xd2:
		v := int64(int32(binary.BigEndian.Uint32(p)))
		return uint64(v), v < 0, nil
	default:
		v := int64(binary.BigEndian.Uint64(p))
		return uint64(v), v < 0, nil
	}
}

// readNumber reads an integer or a float as a float64.
func (r *reader) readNumber() (float64, error) {
	if r.off >= len(r.b) {
		return 0, r.truncated()
	}
	switch c := r.b[r.off]; c {
	case 0xca:
		if !r.has(5) {
			return 0, r.truncated()
		}
		v := math.Float32frombits(binary.BigEndian.Uint32(r.b[r.off+1:]))
		r.off += 5
		return float64(v), nil
	case 0xcb:
		if !r.has(9) {
			return 0, r.truncated()
		}
		v := math.Float64frombits(binary.BigEndian.Uint64(r.b[r.off+1:]))
		r.off += 9
		return v, nil
	}
	start := r.off
	u, neg, err := r.readInt()
	if err != nil {
		if te, ok := err.(*typeError); ok {
			te.want = "number"
			te.off = start
		}
		return 0, err
	}
	if neg {
		return float64(int64(u)), nil
	}
	return float64(u), nil
}

// readBytes reads a str or bin value and returns its bytes (a sub-slice of
// the payload) and its kind.
func (r *reader) readBytes() ([]byte, mtype, error) {
	start := r.off
	t, n, err := r.header()
	if err != nil {
		return nil, t, err
	}
	if t != mStr && t != mBin {
		r.off = start
		return nil, t, &typeError{start, "str", t}
	}
	if !r.has(n) {
		r.off = start
		return nil, t, r.truncated()
	}
	s := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return s, t, nil
}

// readStr reads a str value (not bin).
func (r *reader) readStr() ([]byte, error) {
	if r.peek() != mStr {
		return nil, &typeError{r.off, "str", r.peek()}
	}
	s, _, err := r.readBytes()
	return s, err
}

// readArray reads an array header and returns its length.
func (r *reader) readArray() (int, error) {
	start := r.off
	t, n, err := r.header()
	if err != nil {
		return 0, err
	}
	if t != mArray {
		r.off = start
		return 0, &typeError{start, "array", t}
	}
	return n, nil
}

// readMap reads a map header and returns its pair count.
func (r *reader) readMap() (int, error) {
	start := r.off
	t, n, err := r.header()
	if err != nil {
		return 0, err
	}
	if t != mMap {
		r.off = start
		return 0, &typeError{start, "map", t}
	}
	return n, nil
}

// readNil consumes a nil and reports whether there was one.
func (r *reader) readNil() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// readKey reads a map key: the bytes of a str key, or nil after skipping a
// key of another kind. An array or map key is a structural error.
func (r *reader) readKey() ([]byte, error) {
	switch t := r.peek(); t {
	case mStr:
		k, _, err := r.readBytes()
		return k, err
	case mArray, mMap:
		return nil, &structError{r.off, "map key is " + t.String()}
	}
	return nil, r.skip()
}

// skipN skips n values.
func (r *reader) skipN(n int) error {
	for ; n > 0; n-- {
		if err := r.skip(); err != nil {
			return err
		}
	}
	return nil
}

// readOptStr reads a str or nil, and reports which.
func (r *reader) readOptStr() ([]byte, bool, error) {
	if r.readNil() {
		return nil, false, nil
	}
	s, err := r.readStr()
	return s, err == nil, err
}

// readOptUint reads nil or an integer in [0, limit], and reports which.
func (r *reader) readOptUint(limit uint64) (uint64, bool, error) {
	if r.readNil() {
		return 0, false, nil
	}
	start := r.off
	u, neg, err := r.readInt()
	if err != nil {
		return 0, false, err
	}
	if neg || u > limit {
		return 0, false, &valueError{start, fmt.Sprintf("%d out of range [0, %d]", int64(u), limit)}
	}
	return u, true, nil
}
