package normalize

import (
	"bytes"
	"encoding/hex"
	"math"
	"strings"
	"testing"
)

func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReaderHeader: every header form gives its kind, its length and the
// bytes it takes, and a header cut short is a structural error.
func TestReaderHeader(t *testing.T) {
	for _, tc := range []struct {
		in   string
		typ  mtype
		n    int
		size int // header bytes consumed
	}{
		{"05", mUint, 0, 1}, {"ff", mInt, 0, 1}, {"c0", mNil, 0, 1}, {"c3", mBool, 0, 1},
		{"83", mMap, 3, 1}, {"9f", mArray, 15, 1}, {"a5", mStr, 5, 1},
		{"cc 01", mUint, 1, 1}, {"d1 0001", mInt, 2, 1}, {"ca 00000000", mFloat, 4, 1}, {"cb", mFloat, 8, 1},
		{"c4 07", mBin, 7, 2}, {"d9 20", mStr, 32, 2}, {"c5 0100", mBin, 256, 3}, {"dc 0100", mArray, 256, 3},
		{"de 0002", mMap, 2, 3}, {"db 00010000", mStr, 65536, 5}, {"dd 00000003", mArray, 3, 5},
		{"d4", mExt, 2, 1}, {"d8", mExt, 17, 1}, {"c7 03", mExt, 4, 2}, {"c8 0003", mExt, 4, 3}, {"c9 00000003", mExt, 4, 5},
	} {
		r := reader{b: hexBytes(t, tc.in)}
		typ, n, err := r.header()
		if err != nil || typ != tc.typ || n != tc.n || r.off != tc.size {
			t.Errorf("%s: %v %d (off %d) %v, want %v %d (off %d)", tc.in, typ, n, r.off, err, tc.typ, tc.n, tc.size)
		}
	}
	for _, in := range []string{"", "d9", "c5 01", "dd 0000", "c9 000000", "c1"} {
		r := reader{b: hexBytes(t, in)}
		if _, _, err := r.header(); !isStructural(err) {
			t.Errorf("%q: error %v, want a structural one", in, err)
		}
	}
}

// TestReaderSkip: skip consumes one whole value and rejects what
// github.com/shamaton/msgpack/v2 rejects too.
func TestReaderSkip(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{"93 01 a1 78 82 01 c0 02 91 c3", ""},
		{"92 01", "truncated msgpack at byte 0"}, // claims more elements than bytes left
		{"92 01 cd 00", "truncated msgpack at byte 2"},
		{"d5 01 0000", "msgpack extension types are not supported at byte 0"},
		{"81 91 01 02", "map key is array at byte 1"},
		{"91 c1", "invalid msgpack code 0xc1 at byte 1"},
		{"dd ffffffff", "truncated msgpack at byte 0"},
		{"df 7fffffff", "truncated msgpack at byte 0"},
	} {
		b := hexBytes(t, tc.in)
		r := reader{b: b}
		err := r.skip()
		switch {
		case tc.err == "" && (err != nil || r.off != len(b)):
			t.Errorf("%s: %v at %d", tc.in, err, r.off)
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("%s: error %v, want %s", tc.in, err, tc.err)
		}
	}
}

// TestReaderSkipDeep: nesting is walked without recursion, so no input can
// exhaust the stack.
func TestReaderSkipDeep(t *testing.T) {
	const depth = 1 << 20
	b := append(bytes.Repeat([]byte{0x91}, depth), 0xc0)
	r := reader{b: b}
	if err := r.skip(); err != nil || r.off != len(b) {
		t.Fatalf("%v at %d", err, r.off)
	}
}

// TestReaderInts: every integer encoding, with its two's-complement bits and
// sign; readNumber also takes floats.
func TestReaderInts(t *testing.T) {
	for _, tc := range []struct {
		in  string
		u   uint64
		neg bool
	}{
		{"7f", 127, false}, {"e0", math.MaxUint64 - 31, true}, {"cc ff", 255, false}, {"cd ffff", 65535, false},
		{"ce ffffffff", math.MaxUint32, false}, {"cf ffffffffffffffff", math.MaxUint64, false},
		{"d0 80", math.MaxUint64 - 127, true}, {"d0 05", 5, false}, {"d1 fffe", math.MaxUint64 - 1, true},
		{"d2 80000000", math.MaxUint64 - math.MaxInt32, true}, {"d3 8000000000000000", 1 << 63, true},
	} {
		r := reader{b: hexBytes(t, tc.in)}
		u, neg, err := r.readInt()
		if err != nil || u != tc.u || neg != tc.neg {
			t.Errorf("%s: %d %v %v, want %d %v", tc.in, u, neg, err, tc.u, tc.neg)
		}
	}
	for in, want := range map[string]float64{"ca 3fc00000": 1.5, "cb 3ff8000000000000": 1.5, "d0 fe": -2, "cd 0100": 256} {
		r := reader{b: hexBytes(t, in)}
		if f, err := r.readNumber(); err != nil || f != want {
			t.Errorf("%s: %v %v, want %v", in, f, err, want)
		}
	}
	r := reader{b: hexBytes(t, "a1 78")}
	if _, err := r.readNumber(); err == nil || err.Error() != "want number, got str at byte 0" {
		t.Errorf("str as number: %v", err)
	}
}

// TestReaderOptional: nil reads as absent; a value out of range is a value
// error at its offset.
func TestReaderOptional(t *testing.T) {
	r := reader{b: hexBytes(t, "c0 a2 6869 c0 cd 0100 cd 0101 ff")}
	if s, ok, err := r.readOptStr(); s != nil || ok || err != nil {
		t.Errorf("nil str: %q %v %v", s, ok, err)
	}
	if s, ok, err := r.readOptStr(); string(s) != "hi" || !ok || err != nil {
		t.Errorf("str: %q %v %v", s, ok, err)
	}
	if u, ok, err := r.readOptUint(256); u != 0 || ok || err != nil {
		t.Errorf("nil uint: %d %v %v", u, ok, err)
	}
	if u, ok, err := r.readOptUint(256); u != 256 || !ok || err != nil {
		t.Errorf("uint at limit: %d %v %v", u, ok, err)
	}
	for _, want := range []string{"257 out of range [0, 256]", "-1 out of range [0, 256]"} {
		start := r.off
		_, _, err := r.readOptUint(256)
		if ve, ok := err.(*valueError); !ok || ve.msg != want || ve.off != start {
			t.Errorf("error %#v, want %q at %d", err, want, start)
		}
	}
}
