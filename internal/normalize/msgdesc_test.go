package normalize

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// A readable description of a msgpack value, encoded by the tests:
//
//	nil true false          nil and booleans
//	12 -3                   integers, smallest encoding (as Python's msgpack)
//	1.5                     float64 (anything with '.', 'e' or 'inf'/'nan')
//	"text"                  str (Go quoting)
//	[a, b]  {k: v, k2: v2}  arrays and maps (keys in the order written)
//	i64(5) u64(5) u16(5) i8(-1) f32(1.5)   forced encodings
//	bin(00ff..)             bin from hex
//	ext(1, 00ff)            extension type 1 with the hex data
//	raw(c1)                 raw bytes, copied as is
//	seq(a, n)               inside an array: the n integers a, a+1, ..., a+n-1
//	pairs(a, n)             inside an array: n bigrams [a, a+1], [a+1, a+2], ...
//	arr32[...] map32{...} str8("x")   forced container / string encodings
type descParser struct {
	s   string
	pos int
}

func encodeDesc(s string) ([]byte, error) {
	p := &descParser{s: s}
	var out []byte
	for {
		p.ws()
		if p.pos >= len(p.s) {
			return out, nil
		}
		vals, err := p.value()
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			out = append(out, v...)
		}
	}
}

func (p *descParser) ws() {
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if c == '#' {
			for p.pos < len(p.s) && p.s[p.pos] != '\n' {
				p.pos++
			}
			continue
		}
		if !unicode.IsSpace(rune(c)) && c != ',' {
			return
		}
		p.pos++
	}
}

func (p *descParser) errf(format string, args ...any) error {
	return fmt.Errorf("desc at %d: %s", p.pos, fmt.Sprintf(format, args...))
}

// value returns the encoded values (several for seq and pairs).
func (p *descParser) value() ([][]byte, error) {
	p.ws()
	if p.pos >= len(p.s) {
		return nil, p.errf("unexpected end")
	}
	c := p.s[p.pos]
	switch {
	case c == '[':
		p.pos++
		return p.array(false)
	case c == '{':
		p.pos++
		return p.mapv(false)
	case c == '"':
		str, err := p.quoted()
		if err != nil {
			return nil, err
		}
		return [][]byte{encStr([]byte(str), false)}, nil
	case c == '-' || c == '+' || (c >= '0' && c <= '9'):
		tok := p.word()
		return p.number(tok)
	}
	w := p.word()
	switch w {
	case "nil":
		return [][]byte{{0xc0}}, nil
	case "true":
		return [][]byte{{0xc3}}, nil
	case "false":
		return [][]byte{{0xc2}}, nil
	case "arr32":
		if p.next() != '[' {
			return nil, p.errf("arr32 wants [")
		}
		return p.array(true)
	case "map32":
		if p.next() != '{' {
			return nil, p.errf("map32 wants {")
		}
		return p.mapv(true)
	}
	if p.pos < len(p.s) && p.s[p.pos] == '(' {
		p.pos++
		end := strings.IndexByte(p.s[p.pos:], ')')
		if end < 0 {
			return nil, p.errf("unclosed (")
		}
		arg := strings.TrimSpace(p.s[p.pos : p.pos+end])
		p.pos += end + 1
		return p.call(w, arg)
	}
	return nil, p.errf("unknown word %q", w)
}

func (p *descParser) next() byte {
	p.ws()
	if p.pos >= len(p.s) {
		return 0
	}
	c := p.s[p.pos]
	p.pos++
	return c
}

func (p *descParser) word() string {
	start := p.pos
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if unicode.IsSpace(rune(c)) || strings.IndexByte(",[]{}():", c) >= 0 {
			break
		}
		p.pos++
	}
	return p.s[start:p.pos]
}

func (p *descParser) quoted() (string, error) {
	start := p.pos
	p.pos++
	for p.pos < len(p.s) && p.s[p.pos] != '"' {
		if p.s[p.pos] == '\\' {
			p.pos++
		}
		p.pos++
	}
	p.pos++
	if p.pos > len(p.s) {
		return "", p.errf("unclosed string")
	}
	return strconv.Unquote(p.s[start:p.pos])
}

func (p *descParser) array(force32 bool) ([][]byte, error) {
	var elems [][]byte
	for {
		p.ws()
		if p.pos >= len(p.s) {
			return nil, p.errf("unclosed [")
		}
		if p.s[p.pos] == ']' {
			p.pos++
			break
		}
		vs, err := p.value()
		if err != nil {
			return nil, err
		}
		elems = append(elems, vs...)
	}
	out := arrHeader(len(elems), force32)
	for _, e := range elems {
		out = append(out, e...)
	}
	return [][]byte{out}, nil
}

func (p *descParser) mapv(force32 bool) ([][]byte, error) {
	var elems [][]byte
	for {
		p.ws()
		if p.pos >= len(p.s) {
			return nil, p.errf("unclosed {")
		}
		if p.s[p.pos] == '}' {
			p.pos++
			break
		}
		k, err := p.value()
		if err != nil {
			return nil, err
		}
		p.ws()
		if p.pos >= len(p.s) || p.s[p.pos] != ':' {
			return nil, p.errf("want :")
		}
		p.pos++
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if len(k) != 1 || len(v) != 1 {
			return nil, p.errf("map keys and values must be single values")
		}
		elems = append(elems, k[0], v[0])
	}
	n := len(elems) / 2
	var out []byte
	switch {
	case n < 16 && !force32:
		out = []byte{0x80 | byte(n)}
	case n < 1<<16 && !force32:
		out = []byte{0xde, byte(n >> 8), byte(n)}
	default:
		out = binary.BigEndian.AppendUint32([]byte{0xdf}, uint32(n))
	}
	for _, e := range elems {
		out = append(out, e...)
	}
	return [][]byte{out}, nil
}

func arrHeader(n int, force32 bool) []byte {
	switch {
	case n < 16 && !force32:
		return []byte{0x90 | byte(n)}
	case n < 1<<16 && !force32:
		return []byte{0xdc, byte(n >> 8), byte(n)}
	}
	return binary.BigEndian.AppendUint32([]byte{0xdd}, uint32(n))
}

func encStr(s []byte, force8 bool) []byte {
	n := len(s)
	var out []byte
	switch {
	case n < 32 && !force8:
		out = []byte{0xa0 | byte(n)}
	case n < 256:
		out = []byte{0xd9, byte(n)}
	case n < 1<<16:
		out = []byte{0xda, byte(n >> 8), byte(n)}
	default:
		out = binary.BigEndian.AppendUint32([]byte{0xdb}, uint32(n))
	}
	return append(out, s...)
}

func encBin(b []byte) []byte {
	n := len(b)
	var out []byte
	switch {
	case n < 256:
		out = []byte{0xc4, byte(n)}
	case n < 1<<16:
		out = []byte{0xc5, byte(n >> 8), byte(n)}
	default:
		out = binary.BigEndian.AppendUint32([]byte{0xc6}, uint32(n))
	}
	return append(out, b...)
}

// encInt encodes an integer in its smallest form.
func encInt(v int64) []byte {
	switch {
	case v >= 0 && v <= 0x7f:
		return []byte{byte(v)}
	case v < 0 && v >= -32:
		return []byte{byte(v)}
	case v >= 0 && v <= math.MaxUint8:
		return []byte{0xcc, byte(v)}
	case v >= 0 && v <= math.MaxUint16:
		return []byte{0xcd, byte(v >> 8), byte(v)}
	case v >= 0 && v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32([]byte{0xce}, uint32(v))
	case v >= 0:
		return binary.BigEndian.AppendUint64([]byte{0xcf}, uint64(v))
	case v >= math.MinInt8:
		return []byte{0xd0, byte(v)}
	case v >= math.MinInt16:
		return []byte{0xd1, byte(v >> 8), byte(v)}
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32([]byte{0xd2}, uint32(v))
	}
	return binary.BigEndian.AppendUint64([]byte{0xd3}, uint64(v))
}

func encUint(u uint64) []byte {
	if u <= math.MaxInt64 {
		return encInt(int64(u))
	}
	return binary.BigEndian.AppendUint64([]byte{0xcf}, u)
}

func encFloat64(f float64) []byte {
	return binary.BigEndian.AppendUint64([]byte{0xcb}, math.Float64bits(f))
}

func (p *descParser) number(tok string) ([][]byte, error) {
	if !strings.Contains(tok, "0x") && strings.ContainsAny(tok, ".eE") {
		f, err := strconv.ParseFloat(tok, 64)
		if err != nil {
			return nil, p.errf("%v", err)
		}
		return [][]byte{encFloat64(f)}, nil
	}
	if strings.HasPrefix(tok, "-") {
		v, err := strconv.ParseInt(tok, 10, 64)
		if err != nil {
			return nil, p.errf("%v", err)
		}
		return [][]byte{encInt(v)}, nil
	}
	u, err := strconv.ParseUint(strings.TrimPrefix(tok, "+"), 0, 64)
	if err != nil {
		return nil, p.errf("%v", err)
	}
	return [][]byte{encUint(u)}, nil
}

// call encodes fn(arg): a forced encoding or a generator.
func (p *descParser) call(fn, arg string) ([][]byte, error) {
	args := strings.Split(arg, ",")
	for i := range args {
		args[i] = strings.TrimSpace(args[i])
	}
	switch fn {
	case "i64", "u64", "i8", "i16", "i32", "u8", "u16", "u32":
		v, err := p.ints(fn, args)
		if err != nil || len(v) != 1 {
			return nil, p.errf("%s wants one integer", fn)
		}
		return [][]byte{encFixedInt(fn, v[0])}, nil
	case "f32":
		f, err := strconv.ParseFloat(arg, 32)
		if err != nil {
			return nil, p.errf("f32: %v", err)
		}
		return [][]byte{binary.BigEndian.AppendUint32([]byte{0xca}, math.Float32bits(float32(f)))}, nil
	case "bin", "raw", "str8", "ext":
		b, err := p.bytesCall(fn, arg, args)
		return [][]byte{b}, err
	case "seq", "pairs":
		v, err := p.ints(fn, args)
		if err != nil || len(v) != 2 {
			return nil, p.errf("%s wants start, count", fn)
		}
		return encRun(fn, v[0], v[1]), nil
	}
	return nil, p.errf("unknown function %s", fn)
}

// ints parses integer arguments (signed, or unsigned up to 2^64-1).
func (p *descParser) ints(fn string, args []string) ([]int64, error) {
	var out []int64
	for _, a := range args {
		v, err := strconv.ParseInt(a, 0, 64)
		if err != nil {
			u, err2 := strconv.ParseUint(a, 0, 64)
			if err2 != nil {
				return nil, p.errf("%s: %v", fn, err)
			}
			v = int64(u)
		}
		out = append(out, v)
	}
	return out, nil
}

// encFixedInt encodes x in the integer encoding fn names.
func encFixedInt(fn string, x int64) []byte {
	switch fn {
	case "i64":
		return binary.BigEndian.AppendUint64([]byte{0xd3}, uint64(x))
	case "u64":
		return binary.BigEndian.AppendUint64([]byte{0xcf}, uint64(x))
	case "i32":
		return binary.BigEndian.AppendUint32([]byte{0xd2}, uint32(x))
	case "u32":
		return binary.BigEndian.AppendUint32([]byte{0xce}, uint32(x))
	case "i16":
		return []byte{0xd1, byte(x >> 8), byte(x)}
	case "u16":
		return []byte{0xcd, byte(x >> 8), byte(x)}
	case "i8":
		return []byte{0xd0, byte(x)}
	}
	return []byte{0xcc, byte(x)} // u8
}

// bytesCall encodes bin(hex), raw(hex), str8("s") and ext(type, hex).
func (p *descParser) bytesCall(fn, arg string, args []string) ([]byte, error) {
	switch fn {
	case "bin", "raw":
		b, err := hex.DecodeString(strings.Join(strings.Fields(arg), ""))
		if err != nil {
			return nil, p.errf("%s: %v", fn, err)
		}
		if fn == "raw" {
			return b, nil
		}
		return encBin(b), nil
	case "str8":
		s, err := strconv.Unquote(arg)
		if err != nil {
			return nil, p.errf("str8: %v", err)
		}
		return encStr([]byte(s), true), nil
	}
	if len(args) != 2 {
		return nil, p.errf("ext wants type, hex")
	}
	t, err := strconv.Atoi(args[0])
	if err != nil {
		return nil, p.errf("ext: %v", err)
	}
	b, err := hex.DecodeString(args[1])
	if err != nil {
		return nil, p.errf("ext: %v", err)
	}
	return append([]byte{0xc7, byte(len(b)), byte(t)}, b...), nil
}

// encRun encodes seq(a, n) (the integers a, a+1, ...) or pairs(a, n) (the
// bigrams [a, a+1], [a+1, a+2], ...).
func encRun(fn string, a, n int64) [][]byte {
	var out [][]byte
	for i := int64(0); i < n; i++ {
		if fn == "seq" {
			out = append(out, encInt(a+i))
		} else {
			pair := append([]byte{0x92}, encInt(a+i)...)
			out = append(out, append(pair, encInt(a+i+1)...))
		}
	}
	return out
}

// mustDesc encodes a description or fails the test.
func mustDesc(t *testing.T, s string) []byte {
	t.Helper()
	p, err := encodeDesc(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
