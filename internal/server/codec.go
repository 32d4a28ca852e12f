package server

import (
	"encoding/binary"
	"math"
	"math/bits"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// codec is gRPC's proto codec with a faster decoder for the requests that
// carry prompts: an 8,192-token Route spends a fifth of the router's CPU or
// more decoding token_ids. decodePackedUint32 decodes them a word at a time,
// into memory a stream or a pooled request reuses.
//
// The fast path takes only the canonical encoding of the known fields (each
// field once, token_ids and block_hashes packed, token varints of at most 5
// bytes, valid UTF-8, no mm_items). Anything else — unknown fields, repeated
// or unpacked fields, multimodal items, malformed input — goes to
// proto.Unmarshal, so what a request means, and every error, is exactly what
// protobuf says (FuzzRequestDecode checks it).
type codec struct{ base encoding.CodecV2 }

func newCodec() codec { return codec{base: encoding.GetCodecV2("proto")} }

// Name implements encoding.CodecV2.
func (c codec) Name() string { return c.base.Name() }

// Marshal implements encoding.CodecV2.
func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

// Unmarshal implements encoding.CodecV2.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	var fast func([]byte) bool
	switch m := v.(type) {
	case *kvrouterv1.RouteRequest:
		fast = func(b []byte) bool { return decodeRouteRequest(b, m) }
	case *kvrouterv1.ScoreRequest:
		fast = func(b []byte) bool { return decodeScoreRequest(b, m) }
	default:
		return c.base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if b := buf.ReadOnlyData(); !fast(b) {
		// Declined: protobuf decodes the same bytes, without materializing
		// them a second time.
		return proto.Unmarshal(b, v.(proto.Message))
	}
	return nil
}

// decodeRouteRequest decodes b into m when b is in the form the fast path
// takes, and reports whether it did. m may be a new message, or one decoded
// before: its Prompt and that prompt's token_ids memory are then reused (a
// stream's or a pool's request). When it declines, m is untouched but for a
// reused Prompt, which is reset (proto.Unmarshal resets m anyway). Nothing in
// m aliases b.
func decodeRouteRequest(b []byte, m *kvrouterv1.RouteRequest) bool {
	var (
		seen   uint8
		prompt *kvrouterv1.Prompt
		reqID  string
		temp   *float64
		maxC   uint32
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < 1 || num > 4 || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			prompt = reusePrompt(m.Prompt)
			if !decodePrompt(v, prompt) {
				return false
			}
			b = b[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return false
			}
			reqID = string(v)
			b = b[n:]
		case num == 3 && typ == protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return false
			}
			t := math.Float64frombits(v)
			temp = &t
			b = b[n:]
		case num == 4 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			maxC = uint32(v)
			b = b[n:]
		default:
			return false
		}
	}
	m.Reset() // (a reused message's unknown fields)
	m.Prompt, m.RequestId, m.Temperature, m.MaxCandidates = prompt, reqID, temp, maxC
	return true
}

// reusePrompt returns p reset, keeping its token_ids and block_hashes memory
// (as zero-length slices) for decodePrompt to decode into, or a new Prompt
// when p is nil.
func reusePrompt(p *kvrouterv1.Prompt) *kvrouterv1.Prompt {
	if p == nil {
		return new(kvrouterv1.Prompt)
	}
	toks, hs := p.TokenIds[:0], p.BlockHashes[:0]
	p.Reset()
	p.TokenIds, p.BlockHashes = toks, hs
	return p
}

// decodeScoreRequest is decodeRouteRequest for ScoreRequest.
func decodeScoreRequest(b []byte, m *kvrouterv1.ScoreRequest) bool {
	if len(b) == 0 {
		return true
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return false
	}
	v, n2 := protowire.ConsumeBytes(b[n:])
	if n2 < 0 || n+n2 != len(b) {
		return false
	}
	p := new(kvrouterv1.Prompt)
	if !decodePrompt(v, p) {
		return false
	}
	m.Prompt = p
	return true
}

// decodePrompt decodes b into p (a new or reset message) in the fast path's
// form. token_ids and block_hashes are decoded into p's memory when it has
// room.
func decodePrompt(b []byte, p *kvrouterv1.Prompt) bool {
	buf, hbuf := p.TokenIds[:0], p.BlockHashes[:0]
	p.TokenIds, p.BlockHashes = nil, nil
	var seen uint8
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < 1 || num > 5 || typ != protowire.BytesType || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		v, n2 := protowire.ConsumeBytes(b[n:])
		if n2 < 0 {
			return false
		}
		b = b[n+n2:]
		switch num {
		case 2:
			toks, ok := decodePackedUint32(v, buf)
			if !ok {
				return false
			}
			p.TokenIds = toks
		case 3:
			hs, ok := decodePackedUint64(v, hbuf)
			if !ok {
				return false
			}
			p.BlockHashes = hs
		default:
			if !utf8.Valid(v) {
				return false
			}
			switch num {
			case 1:
				p.Model = string(v)
			case 4:
				p.LoraName = string(v)
			case 5:
				p.CacheSalt = string(v)
			}
		}
	}
	return true
}

const contBits = 0x8080808080808080 // the continuation bit of each byte of a word

// decodePackedUint32 decodes packed varints of at most 5 bytes each (every
// uint32 an encoder writes), truncated to 32 bits as protobuf does. It works
// on 8-byte words: the bytes without a continuation bit end the varints, and
// each varint's 7-bit groups are gathered with shifts and masks, with no
// branch on its length; two varints are taken from one word when both end in
// it, which halves the loop's dependency chain for typical token ids (1 to 3
// bytes), and a pair of at most 3 bytes each (every id under 2^21, so any
// vocabulary's) is gathered with fewer operations. It declines (false) a
// truncated varint or one over 5 bytes. The result is in dst's memory when
// it has room (dst's contents are ignored), else in a new slice of exactly
// the tokens' length.
//
// A decoder reading a varint a byte at a time, with a branch per length, was
// tried: twice as fast on one prompt decoded over and over (the branch
// predictor learns it), slower on 64 different prompts, as a router sees.
func decodePackedUint32(b []byte, dst []uint32) ([]uint32, bool) {
	if len(b) == 0 {
		return nil, true
	}
	if b[len(b)-1] >= 0x80 {
		return nil, false // the last varint does not end
	}
	count, i := 0, 0
	for ; i+8 <= len(b); i += 8 {
		count += bits.OnesCount64(^binary.LittleEndian.Uint64(b[i:]) & contBits)
	}
	for ; i < len(b); i++ {
		if b[i] < 0x80 {
			count++
		}
	}
	out := dst[:0]
	if cap(out) < count {
		out = make([]uint32, count)
	}
	out = out[:count]
	j := 0
	for i = 0; i+8 <= len(b) && j+2 <= len(out); {
		w := binary.LittleEndian.Uint64(b[i:])
		stops := ^w & contBits
		k1 := bits.TrailingZeros64(stops)>>3 + 1 // bytes in the first varint; 9 when none ends in w
		if k1 > 5 {
			return nil, false
		}
		x1 := w & (1<<(8*uint(k1)) - 1)
		rest := stops & (stops - 1)
		if rest == 0 {
			out[j] = gather7(x1)
			j++
			i += k1 // the next varint ends past this word
			continue
		}
		end := bits.TrailingZeros64(rest)>>3 + 1 // where the second varint ends in w
		k2 := end - k1
		if k2 > 5 {
			return nil, false
		}
		x2 := w >> (8 * uint(k1)) & (1<<(8*uint(k2)) - 1)
		if (k1|k2)&4 == 0 { // both of at most 3 bytes: every id under 2^21
			out[j], out[j+1] = gather3(x1), gather3(x2)
		} else {
			out[j], out[j+1] = gather7(x1), gather7(x2)
		}
		j += 2
		i += end
	}
	for b = b[i:]; len(b) > 0; j++ {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 || n > 5 {
			return nil, false
		}
		out[j] = uint32(v)
		b = b[n:]
	}
	return out, true
}

// gather3 is gather7 for a varint of at most 3 bytes.
func gather3(x uint64) uint32 {
	return uint32(x&0x7f | x>>1&(0x7f<<7) | x>>2&(0x7f<<14))
}

// gather7 joins the 7-bit groups of a varint of at most 5 bytes, given as the
// low bytes of x (the rest zero), truncated to 32 bits.
func gather7(x uint64) uint32 {
	return uint32(x&0x7f | x>>1&(0x7f<<7) | x>>2&(0x7f<<14) | x>>3&(0x7f<<21) | x>>4&(0x7f<<28))
}

// countVarints counts the bytes of b that end a varint.
func countVarints(b []byte) int {
	count, i := 0, 0
	for ; i+8 <= len(b); i += 8 {
		count += bits.OnesCount64(^binary.LittleEndian.Uint64(b[i:]) & contBits)
	}
	for ; i < len(b); i++ {
		if b[i] < 0x80 {
			count++
		}
	}
	return count
}

// decodePackedUint64 decodes packed varints (block hashes: up to 10 bytes
// each), into dst's memory when it has room.
func decodePackedUint64(b []byte, dst []uint64) ([]uint64, bool) {
	if len(b) == 0 {
		return nil, true
	}
	count := countVarints(b)
	out := dst[:0]
	if cap(out) < count {
		out = make([]uint64, 0, count)
	}
	for len(b) > 0 {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return nil, false
		}
		out = append(out, v)
		b = b[n:]
	}
	return out, true
}
