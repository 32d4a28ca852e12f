package normalize

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// decodeField decodes the value of field f at r into ev. Values that are
// absent or nil keep the field's default; a value of the wrong kind or out
// of range is an error for the event, a structural error one for the batch.
func (rb *rawBatch) decodeField(r *reader, ev *rawEvent, f field) error {
	switch f {
	case fBlockHashes:
		return rb.decodeBlockHashes(r, ev)
	case fParent:
		if r.readNil() {
			ev.HasParent = false
			return nil
		}
		h, err := r.readHash()
		if err != nil {
			return err
		}
		ev.HasParent, ev.Parent = true, h
	case fTokens:
		return rb.decodeTokens(r, ev)
	case fBlockSize:
		return decodeBlockSize(r, ev)
	case fLoRAID:
		// Deprecated; any value is accepted and ignored.
		return r.skip()
	case fMedium:
		s, _, err := r.readOptStr()
		ev.Medium = s
		return err
	case fLoRAName:
		return decodeLoRAName(r, ev)
	case fExtraKeys:
		return rb.decodeExtraKeys(r, ev)
	case fGroup:
		u, ok, err := r.readOptUint(math.MaxUint32)
		if err != nil {
			return err
		}
		ev.HasGroup, ev.Group = ok, uint32(u)
	case fKind:
		s, ok, err := r.readOptStr()
		ev.HasKind, ev.SpecKind = ok, s
		return err
	case fWindow:
		if r.readNil() {
			ev.HasWindow = false
			return nil
		}
		u, _, err := r.readInt()
		if err != nil {
			return err
		}
		ev.HasWindow, ev.SlidingWindow = true, int64(u)
	case fLocality:
		s, _, err := r.readOptStr()
		ev.Locality = s
		return err
	case fCacheSalt:
		s, ok, err := r.readOptStr()
		ev.HasCacheSalt, ev.CacheSalt = ok, s
		return err
	}
	return nil
}

// decodeBlockHashes reads block_hashes: a list of hashes, or nil.
func (rb *rawBatch) decodeBlockHashes(r *reader, ev *rawEvent) error {
	if r.readNil() {
		return nil
	}
	n, err := r.readArray()
	if err != nil {
		return err
	}
	if n > len(r.b)-r.off {
		return r.truncated()
	}
	base := len(rb.hashes)
	rb.hashes = slices.Grow(rb.hashes, n) // at most one copy per array
	for i := 0; i < n; i++ {
		// Inline fast path: most hashes are full 64-bit integers.
		if r.off+9 <= len(r.b) && (r.b[r.off] == 0xcf || r.b[r.off] == 0xd3) {
			rb.hashes = append(rb.hashes, binary.BigEndian.Uint64(r.b[r.off+1:]))
			r.off += 9
			continue
		}
		h, err := r.readHash()
		if err != nil {
			return err
		}
		rb.hashes = append(rb.hashes, h)
	}
	ev.BlockHashes = rb.hashes[base:len(rb.hashes):len(rb.hashes)]
	return nil
}

// readHash reads a block hash in any of the hash forms: an integer (a
// signed one's two's-complement bits) or bytes.
func (r *reader) readHash() (uint64, error) {
	switch r.peek() {
	case mBin:
		b, _, err := r.readBytes()
		if err != nil {
			return 0, err
		}
		return hashFromBytes(b), nil
	case mUint, mInt:
		u, _, err := r.readInt()
		return u, err
	}
	return 0, &typeError{r.off, "int or bin hash", r.peek()}
}

// hashFromBytes reads a hash sent as bytes: the last 8, big-endian,
// left-padded with zeros (vLLM's digests are 32 bytes long).
func hashFromBytes(b []byte) uint64 {
	if len(b) > 8 {
		b = b[len(b)-8:]
	}
	var h uint64
	for _, c := range b {
		h = h<<8 | uint64(c)
	}
	return h
}

// decodeBlockSize reads block_size: nil, or a positive int32.
func decodeBlockSize(r *reader, ev *rawEvent) error {
	start := r.off
	u, ok, err := r.readOptUint(math.MaxInt32)
	if err != nil {
		return err
	}
	ev.BlockSize = -1
	if ok {
		if u == 0 {
			return &valueError{start, "block size 0"}
		}
		ev.BlockSize = int32(u)
	}
	return nil
}

// decodeLoRAName reads lora_name: a str or nil, or (wire.loraSlotSalt) a
// map whose "cache_salt" is the event's cache salt.
func decodeLoRAName(r *reader, ev *rawEvent) error {
	if wire.loraSlotSalt && r.peek() == mMap {
		ev.LoRAName = nil
		return decodeSaltMap(r, ev)
	}
	s, _, err := r.readOptStr()
	ev.LoRAName = s
	return err
}

// decodeSaltMap reads {"cache_salt": salt, ...}; other keys are ignored and
// the last "cache_salt" wins, as in a decoded map.
func decodeSaltMap(r *reader, ev *rawEvent) error {
	n, _ := r.readMap()
	saltOff := -1
	for i := 0; i < n; i++ {
		key, err := r.readKey()
		if err != nil {
			return err
		}
		if string(key) == fieldNames[fCacheSalt] {
			saltOff = r.off
		}
		if err := r.skip(); err != nil {
			return err
		}
	}
	if saltOff < 0 {
		return nil
	}
	end := r.off
	r.off = saltOff
	s, ok, err := r.readOptStr()
	if err != nil {
		return err
	}
	ev.HasCacheSalt, ev.CacheSalt = ok, s
	r.off = end
	return nil
}

// decodeTokens reads token_ids: nil, ints in [0, 2^32), or EAGLE bigrams
// [a, b] (every first element and the last second element are kept). The
// ints are the hot path of the whole decode: their common encodings are read
// inline.
func (rb *rawBatch) decodeTokens(r *reader, ev *rawEvent) error {
	ev.Bigram = false
	if r.readNil() {
		ev.Tokens = nil
		return nil
	}
	n, err := r.readArray()
	if err != nil {
		return err
	}
	base := len(rb.tokens)
	if n > 0 && r.peek() == mArray {
		if err := rb.decodeBigrams(r, n); err != nil {
			return err
		}
		ev.Bigram = true
		ev.Tokens = rb.tokens[base:len(rb.tokens):len(rb.tokens)]
		return nil
	}
	if n > len(r.b)-r.off {
		return r.truncated()
	}
	rb.tokens = growU32(rb.tokens, n)
	toks := rb.tokens[base : base+n]
	b, off := r.b, r.off
	for i := range toks {
		if off >= len(b) {
			r.off = off
			return r.truncated()
		}
		switch c := b[off]; {
		case c <= 0x7f:
			toks[i] = uint32(c)
			off++
		case c == 0xcd && off+3 <= len(b):
			toks[i] = uint32(b[off+1])<<8 | uint32(b[off+2])
			off += 3
		case c == 0xce && off+5 <= len(b):
			toks[i] = binary.BigEndian.Uint32(b[off+1:])
			off += 5
		case c == 0xcc && off+2 <= len(b):
			toks[i] = uint32(b[off+1])
			off += 2
		default:
			r.off = off
			t, err := r.readToken()
			if err != nil {
				return err
			}
			toks[i] = t
			off = r.off
		}
	}
	r.off = off
	rb.tokens = rb.tokens[:base+n]
	ev.Tokens = rb.tokens[base:len(rb.tokens):len(rb.tokens)]
	return nil
}

// decodeBigrams appends the tokens of n EAGLE bigrams to rb.tokens: every
// first element, then the last second element.
func (rb *rawBatch) decodeBigrams(r *reader, n int) error {
	var last uint32
	for i := 0; i < n; i++ {
		start := r.off
		m, err := r.readArray()
		if err != nil {
			return err
		}
		if m != 2 {
			return &valueError{start, fmt.Sprintf("token bigram %d has %d elements, want 2", i, m)}
		}
		a, err := r.readToken()
		if err != nil {
			return err
		}
		b, err := r.readToken()
		if err != nil {
			return err
		}
		rb.tokens = append(rb.tokens, a)
		last = b
	}
	rb.tokens = append(rb.tokens, last)
	return nil
}

// growU32 makes room for n more elements after len(s).
func growU32(s []uint32, n int) []uint32 {
	if cap(s)-len(s) >= n {
		return s
	}
	ns := make([]uint32, len(s), 2*cap(s)+n)
	copy(ns, s)
	return ns
}

// readToken reads one token id: an integer in [0, 2^32).
func (r *reader) readToken() (uint32, error) {
	start := r.off
	u, neg, err := r.readInt()
	if err != nil {
		return 0, err
	}
	if neg || u > math.MaxUint32 {
		return 0, &valueError{start, fmt.Sprintf("token %d out of range [0, 2^32)", int64(u))}
	}
	return uint32(u), nil
}
