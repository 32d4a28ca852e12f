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
// more decoding token_ids. decodePackedUint32 decodes them into memory a
// stream or a pooled request reuses, with no allocation and no zeroing.
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

// reusePrompt returns p reset, keeping its token_ids memory (as a zero-length
// slice) for decodePrompt to decode into, or a new Prompt when p is nil.
func reusePrompt(p *kvrouterv1.Prompt) *kvrouterv1.Prompt {
	if p == nil {
		return new(kvrouterv1.Prompt)
	}
	toks := p.TokenIds[:0]
	p.Reset()
	p.TokenIds = toks
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
// form. token_ids are decoded into p.TokenIds' memory when it has room.
func decodePrompt(b []byte, p *kvrouterv1.Prompt) bool {
	buf := p.TokenIds[:0]
	p.TokenIds = nil
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
			hs, ok := decodePackedUint64(v)
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

// decodePackedUint32 decodes packed varints of at most 5 bytes each (every
// uint32 an encoder writes), truncated to 32 bits as protobuf does. Token ids
// take 1 to 3 bytes, and those lengths are read byte by byte with a branch
// each: on this path that beat both protowire.ConsumeVarint and a
// branch-free decoder working on 8-byte words by 1.5-2.5x, on uniform ids
// and on mixes of 2- and 3-byte ids alike (see docs/benchmarks.md). It
// declines (false) a truncated varint or one over 5 bytes. The result is in
// dst's memory when it has room (dst's contents are ignored), else in a new
// slice of exactly the tokens' length.
func decodePackedUint32(b []byte, dst []uint32) ([]uint32, bool) {
	if len(b) == 0 {
		return nil, true
	}
	if b[len(b)-1] >= 0x80 {
		return nil, false // the last varint does not end (so every suffix of b holds an end)
	}
	out := dst[:cap(dst)]
	if len(out) == 0 {
		out = make([]uint32, countVarints(b))
	}
	j := 0
	for i := 0; i < len(b); j++ {
		if j == len(out) { // dst was short: the rest, counted, in a new slice
			grown := make([]uint32, j+countVarints(b[i:]))
			copy(grown, out)
			out = grown
		}
		c0 := b[i]
		if c0 < 0x80 {
			out[j] = uint32(c0)
			i++
			continue
		}
		if i+2 < len(b) {
			c1, c2 := b[i+1], b[i+2]
			v := uint32(c0&0x7f) | uint32(c1&0x7f)<<7
			if c1 < 0x80 {
				out[j] = v
				i += 2
				continue
			}
			if c2 < 0x80 {
				out[j] = v | uint32(c2)<<14
				i += 3
				continue
			}
		}
		v, n := protowire.ConsumeVarint(b[i:])
		if n < 0 || n > 5 {
			return nil, false
		}
		out[j] = uint32(v)
		i += n
	}
	return out[:j], true
}

// countVarints counts the bytes of b that end a varint.
func countVarints(b []byte) int {
	const contBits = 0x8080808080808080 // the continuation bit of each byte of a word
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

// decodePackedUint64 decodes packed varints (block hashes: up to 10 bytes each).
func decodePackedUint64(b []byte) ([]uint64, bool) {
	if len(b) == 0 {
		return nil, true
	}
	count := 0
	for _, c := range b {
		if c < 0x80 {
			count++
		}
	}
	out := make([]uint64, 0, count)
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
