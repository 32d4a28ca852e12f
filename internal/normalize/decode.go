package normalize

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Tag is the kind of a decoded engine event.
type Tag uint8

// Event tags.
const (
	TagUnknown Tag = iota // a tag this package does not know; the event is skipped
	TagStored             // BlockStored
	TagRemoved            // BlockRemoved
	TagCleared            // AllBlocksCleared
	NumTags
)

var tagNames = [...]string{"unknown", "BlockStored", "BlockRemoved", "AllBlocksCleared"}

// String returns the tag as engines send it ("unknown" for TagUnknown).
func (t Tag) String() string {
	if int(t) < len(tagNames) {
		return tagNames[t]
	}
	return fmt.Sprintf("Tag(%d)", t)
}

// ExtraKind is the kind of one item of a block's extra keys.
type ExtraKind uint8

// Extra key item kinds.
const (
	ExtraOther ExtraKind = iota // anything else (ignored)
	ExtraStr                    // a string: LoRA name, multimodal hash or cache salt
	ExtraBytes                  // a binary, such as a prompt-embeds digest (ignored)
	ExtraPair                   // a multimodal [identifier, offset] pair
	ExtraInt                    // an integer (ignored)
)

// ExtraKey is one item of a block's extra keys. Str points into the payload.
type ExtraKey struct {
	Kind ExtraKind
	Str  []byte // ExtraStr, ExtraBytes, and the identifier of ExtraPair
	Int  int64  // the offset of ExtraPair, the value of ExtraInt
}

// ExtraKeys is the extra keys of one block; Present is false for nil.
type ExtraKeys struct {
	Present bool
	Items   []ExtraKey
}

// RawEvent is one decoded engine event, before normalization. Byte slices
// point into the payload; other slices into the RawBatch's memory.
type RawEvent struct {
	Tag  Tag
	Name []byte // the tag as sent
	// Err is the event's decode error; the other fields are then incomplete.
	Err *EventError

	BlockHashes   []uint64
	HasParent     bool
	Parent        uint64
	Tokens        []uint32 // EAGLE bigrams already folded
	Bigram        bool     // token_ids came as EAGLE bigrams
	BlockSize     int32    // -1 when absent
	Medium        []byte
	LoRAName      []byte
	HasCacheSalt  bool
	CacheSalt     []byte
	ExtraKeys     []ExtraKeys // nil when absent
	HasGroup      bool
	Group         uint32
	HasKind       bool
	SpecKind      []byte // kv_cache_spec_kind
	HasWindow     bool
	SlidingWindow int64
	Locality      []byte
}

// RawBatch is one decoded payload. Its memory is reused by the next
// DecodeBatch into it.
type RawBatch struct {
	TS     float64
	DPRank int32 // -1 when absent
	Events []RawEvent

	hashes []uint64
	tokens []uint32
	extras []ExtraKeys
	items  []ExtraKey
	rd     reader
}

func (rb *RawBatch) reset() {
	rb.TS = 0
	rb.DPRank = -1
	clear(rb.Events) // drop references into the previous payload
	rb.Events = rb.Events[:0]
	rb.hashes = rb.hashes[:0]
	rb.tokens = rb.tokens[:0]
	rb.extras = rb.extras[:0]
	rb.items = rb.items[:0]
}

// DecodeError says why a payload is not an event batch at all.
type DecodeError struct {
	Offset int    // byte offset in the payload, -1 when unknown
	Field  string // the batch field or event, "" for the batch itself
	Msg    string
}

// Error describes the problem and its byte offset.
func (e *DecodeError) Error() string {
	s := "decode batch: "
	if e.Field != "" {
		s += e.Field + ": "
	}
	s += e.Msg
	if e.Offset >= 0 {
		s += fmt.Sprintf(" at byte %d", e.Offset)
	}
	return s
}

// EventError is a per-event decode or validation error: the event is skipped.
type EventError struct {
	Index  int    // the event's index in the batch
	Tag    string // the event's tag, "" when unreadable
	Field  string // the offending field
	Offset int    // byte offset in the payload, -1 when unknown
	Msg    string
}

// Error names the event, its tag, the field and the byte offset.
func (e *EventError) Error() string {
	s := fmt.Sprintf("event %d", e.Index)
	if e.Tag != "" {
		s += " (" + e.Tag + ")"
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	s += ": " + e.Msg
	if e.Offset >= 0 {
		s += fmt.Sprintf(" at byte %d", e.Offset)
	}
	return s
}

// Field indexes in declaration (array) order; map fields are read in this
// order too, so the first error reported is the same for both encodings.
const (
	fBlockHashes = iota
	fParent
	fTokens
	fBlockSize
	fLoRAID
	fMedium
	fLoRAName
	fExtraKeys
	fGroup
	fKind
	fWindow
	fLocality
	fCacheSalt
	numFields
)

var fieldNames = [numFields]string{
	"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
	"lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
	"locality", "cache_salt",
}

// Array positions (after the tag) of BlockRemoved's fields.
var removedArrayFields = [...]int{fBlockHashes, fMedium, fGroup, fLocality}

func fieldIndex(name []byte) int {
	for i, f := range fieldNames {
		if string(name) == f {
			return i
		}
	}
	return -1
}

func tagOf(name []byte) Tag {
	switch string(name) {
	case "BlockStored":
		return TagStored
	case "BlockRemoved":
		return TagRemoved
	case "AllBlocksCleared":
		return TagCleared
	}
	return TagUnknown
}

// DecodeBatch decodes one msgpack payload into rb, reusing rb's memory. It
// returns a *DecodeError when the payload is not an event batch; events that
// are malformed carry their own *EventError in RawEvent.Err. Byte slices in rb
// point into payload.
func DecodeBatch(payload []byte, rb *RawBatch) error {
	rb.reset()
	r := &rb.rd
	r.b, r.off = payload, 0
	err := rb.decode(r)
	r.b = nil
	if err != nil {
		rb.reset()
	}
	return err
}

func batchErr(field string, err error) error {
	switch e := err.(type) {
	case *structError:
		return &DecodeError{Offset: e.off, Field: field, Msg: e.msg}
	case *typeError:
		return &DecodeError{Offset: e.off, Field: field, Msg: fmt.Sprintf("want %s, got %s", e.want, e.got)}
	}
	return &DecodeError{Offset: -1, Field: field, Msg: err.Error()}
}

func (rb *RawBatch) decode(r *reader) error {
	if len(r.b) == 0 {
		return &DecodeError{Offset: 0, Msg: "empty payload"}
	}
	start := r.off
	t, n, err := r.header()
	if err != nil {
		return batchErr("", err)
	}
	switch t {
	case mArray:
		if n < 2 {
			return &DecodeError{Offset: start, Msg: fmt.Sprintf("batch array has %d elements, want [ts, events] or [ts, events, dp_rank]", n)}
		}
		if rb.TS, err = r.readNumber(); err != nil {
			return batchErr("ts", err)
		}
		if err := rb.decodeEvents(r); err != nil {
			return err
		}
		if n >= 3 {
			if err := rb.decodeDPRank(r, "dp_rank"); err != nil {
				return err
			}
		}
		for i := 3; i < n; i++ {
			if err := r.skip(); err != nil {
				return batchErr(fmt.Sprintf("batch[%d]", i), err)
			}
		}
	case mMap:
		// Last occurrence of each key wins, as in a decoded map.
		tsOff, evOff, dprOff, attnOff := -1, -1, -1, -1
		for i := 0; i < n; i++ {
			kstart := r.off
			if r.peek() == mArray || r.peek() == mMap {
				return &DecodeError{Offset: kstart, Field: "batch", Msg: "map key is " + r.peek().String()}
			}
			var key []byte
			if r.peek() == mStr {
				key, _, _ = r.readBytes()
			} else if err := r.skip(); err != nil {
				return batchErr("batch", err)
			}
			voff := r.off
			if err := r.skip(); err != nil {
				return batchErr(string(key), err)
			}
			switch string(key) {
			case "ts":
				tsOff = voff
			case "events":
				evOff = voff
			case "data_parallel_rank":
				dprOff = voff
			case "attn_dp_rank":
				attnOff = voff
			}
		}
		end := r.off
		if evOff < 0 {
			return &DecodeError{Offset: start, Field: "events", Msg: "batch map has no events"}
		}
		if tsOff >= 0 {
			r.off = tsOff
			if rb.TS, err = r.readNumber(); err != nil {
				return batchErr("ts", err)
			}
		}
		r.off = evOff
		if err := rb.decodeEvents(r); err != nil {
			return err
		}
		if dprOff >= 0 {
			r.off = dprOff
			if err := rb.decodeDPRank(r, "data_parallel_rank"); err != nil {
				return err
			}
		}
		if rb.DPRank < 0 && attnOff >= 0 {
			r.off = attnOff
			if err := rb.decodeDPRank(r, "attn_dp_rank"); err != nil {
				return err
			}
		}
		r.off = end
	default:
		return &DecodeError{Offset: start, Msg: fmt.Sprintf("want array or map, got %s", t)}
	}
	if r.off != len(r.b) {
		return &DecodeError{Offset: r.off, Msg: fmt.Sprintf("%d trailing bytes after the batch", len(r.b)-r.off)}
	}
	return nil
}

func (rb *RawBatch) decodeDPRank(r *reader, field string) error {
	if r.readNil() {
		return nil
	}
	start := r.off
	u, neg, err := r.readInt()
	if err != nil {
		return batchErr(field, err)
	}
	if neg || u > math.MaxInt32 {
		return &DecodeError{Offset: start, Field: field, Msg: fmt.Sprintf("rank %d out of range", int64(u))}
	}
	rb.DPRank = int32(u)
	return nil
}

func (rb *RawBatch) decodeEvents(r *reader) error {
	n, err := r.readArray()
	if err != nil {
		return batchErr("events", err)
	}
	if n > len(r.b)-r.off {
		return &DecodeError{Offset: r.off, Field: "events", Msg: fmt.Sprintf("%d events claimed, truncated msgpack", n)}
	}
	for i := 0; i < n; i++ {
		rb.Events = append(rb.Events, RawEvent{BlockSize: -1})
		if err := rb.decodeEvent(r, &rb.Events[len(rb.Events)-1], i); err != nil {
			return batchErr(fmt.Sprintf("events[%d]", i), err)
		}
	}
	return nil
}

// isStructural reports whether err means the payload is not valid msgpack.
func isStructural(err error) bool {
	_, ok := err.(*structError)
	return ok
}

// eventErr converts a field error into an EventError.
func eventErr(idx int, ev *RawEvent, field int, err error) *EventError {
	e := &EventError{Index: idx, Tag: string(ev.Name), Offset: -1}
	if field >= 0 {
		e.Field = fieldNames[field]
	}
	switch te := err.(type) {
	case *typeError:
		e.Offset = te.off
		e.Msg = fmt.Sprintf("want %s, got %s", te.want, te.got)
	case *valueError:
		e.Offset = te.off
		e.Msg = te.msg
	default:
		e.Msg = err.Error()
	}
	return e
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

// decodeEvent decodes one event in a single pass. It returns only structural
// errors (the payload is not msgpack); field problems go to ev.Err, after
// which the rest of the value is skipped and validated.
func (rb *RawBatch) decodeEvent(r *reader, ev *RawEvent, idx int) error {
	start := r.off
	switch r.peek() {
	case mArray:
		n, err := r.readArray()
		if err != nil {
			return err
		}
		if n == 0 {
			ev.Err = eventErr(idx, ev, -1, &valueError{start, "empty event array"})
			return nil
		}
		name, err := r.readStr()
		if err != nil {
			if isStructural(err) {
				return err
			}
			te := err.(*typeError)
			ev.Err = eventErr(idx, ev, -1, &valueError{te.off, "tag: want str, got " + te.got.String()})
			return r.skipN(n) // the tag and the fields
		}
		ev.Name = name
		ev.Tag = tagOf(name)
		var fields []int
		switch ev.Tag {
		case TagStored:
			fields = storedArrayFields[:]
		case TagRemoved:
			fields = removedArrayFields[:]
		}
		for i := 1; i < n; i++ {
			if i-1 >= len(fields) || ev.Err != nil {
				if err := r.skip(); err != nil {
					return err
				}
				continue
			}
			f := fields[i-1]
			voff := r.off
			if err := rb.decodeField(r, ev, f); err != nil {
				if isStructural(err) {
					return err
				}
				ev.Err = eventErr(idx, ev, f, err)
				r.off = voff
				if err := r.skip(); err != nil {
					return err
				}
			}
		}
		return nil
	case mMap:
		n, err := r.readMap()
		if err != nil {
			return err
		}
		// Fields are decoded as they come (a later duplicate key replaces an
		// earlier one, as in a decoded map); the error reported is the first
		// in field order among the fields that apply to the tag.
		var errs [numFields]error
		var errMask uint32
		typeOff := -1
		for i := 0; i < n; i++ {
			key, err := r.readKey()
			if err != nil {
				return err
			}
			voff := r.off
			if string(key) == "type" {
				typeOff = voff
				if err := r.skip(); err != nil {
					return err
				}
				continue
			}
			f := -1
			if key != nil {
				f = fieldIndex(key)
			}
			if f < 0 {
				if err := r.skip(); err != nil {
					return err
				}
				continue
			}
			err = rb.decodeField(r, ev, f)
			errs[f] = err
			errMask &^= 1 << f
			if err != nil {
				if isStructural(err) {
					return err
				}
				errMask |= 1 << f
				r.off = voff
				if err := r.skip(); err != nil {
					return err
				}
			}
		}
		end := r.off
		if typeOff < 0 {
			ev.Err = eventErr(idx, ev, -1, &valueError{start, `event map has no "type"`})
			return nil
		}
		r.off = typeOff
		name, err := r.readStr()
		r.off = end
		if err != nil {
			te := err.(*typeError)
			ev.Err = eventErr(idx, ev, -1, &valueError{te.off, "type: want str, got " + te.got.String()})
			return nil
		}
		ev.Name = name
		ev.Tag = tagOf(name)
		ev.keepFields()
		for f := 0; f < numFields; f++ {
			if errMask&(1<<f) != 0 && ev.fieldApplies(f) {
				ev.Err = eventErr(idx, ev, f, errs[f])
				break
			}
		}
		return nil
	}
	t := r.peek()
	if err := r.skip(); err != nil {
		return err
	}
	ev.Err = eventErr(idx, ev, -1, &typeError{start, "array or map event", t})
	return nil
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

// fieldApplies reports whether field f belongs to the event's tag.
func (ev *RawEvent) fieldApplies(f int) bool {
	switch ev.Tag {
	case TagStored:
		return true
	case TagRemoved:
		return removedField(f)
	}
	return false
}

// keepFields clears the fields a map event carried that do not belong to its tag.
func (ev *RawEvent) keepFields() {
	switch ev.Tag {
	case TagStored:
		return
	case TagRemoved:
		*ev = RawEvent{Tag: ev.Tag, Name: ev.Name, BlockSize: -1, BlockHashes: ev.BlockHashes,
			Medium: ev.Medium, HasGroup: ev.HasGroup, Group: ev.Group, Locality: ev.Locality,
			HasKind: ev.HasKind, SpecKind: ev.SpecKind}
	default:
		*ev = RawEvent{Tag: ev.Tag, Name: ev.Name, BlockSize: -1}
	}
}

var storedArrayFields = [...]int{fBlockHashes, fParent, fTokens, fBlockSize, fLoRAID, fMedium,
	fLoRAName, fExtraKeys, fGroup, fKind, fWindow, fLocality}

// removedField reports whether f belongs to BlockRemoved: its array fields,
// and kv_cache_spec_kind, which map-encoded removes may carry.
func removedField(f int) bool {
	return f == fBlockHashes || f == fMedium || f == fGroup || f == fLocality || f == fKind
}

// valueError is a well-typed value that is out of range.
type valueError struct {
	off int
	msg string
}

func (e *valueError) Error() string { return e.msg }

// readHash reads a block hash: uint64, int64 (bits reinterpreted) or bytes
// (the last 8, big-endian, left-padded).
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

// readOptStr reads a str or nil.
func (r *reader) readOptStr() ([]byte, bool, error) {
	if r.readNil() {
		return nil, false, nil
	}
	s, err := r.readStr()
	return s, err == nil, err
}

func (r *reader) readOptUint(max uint64) (uint64, bool, error) {
	if r.readNil() {
		return 0, false, nil
	}
	start := r.off
	u, neg, err := r.readInt()
	if err != nil {
		return 0, false, err
	}
	if neg || u > max {
		return 0, false, &valueError{start, fmt.Sprintf("%d out of range [0, %d]", int64(u), max)}
	}
	return u, true, nil
}

func (rb *RawBatch) decodeField(r *reader, ev *RawEvent, f int) error {
	switch f {
	case fBlockHashes:
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
		for i := 0; i < n; i++ {
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
	case fLoRAID:
		// Deprecated; any value is accepted and ignored.
		return r.skip()
	case fMedium:
		s, _, err := r.readOptStr()
		ev.Medium = s
		return err
	case fLoRAName:
		if r.peek() == mMap {
			// SGLang arrays: {"cache_salt": ...} in the LoRA slot.
			ev.LoRAName = nil
			n, _ := r.readMap()
			saltOff := -1 // the last "cache_salt" wins, as in a decoded map
			for i := 0; i < n; i++ {
				key, err := r.readKey()
				if err != nil {
					return err
				}
				if string(key) == "cache_salt" {
					saltOff = r.off
				}
				if err := r.skip(); err != nil {
					return err
				}
			}
			if saltOff >= 0 {
				end := r.off
				r.off = saltOff
				s, ok, err := r.readOptStr()
				if err != nil {
					return err
				}
				ev.HasCacheSalt, ev.CacheSalt = ok, s
				r.off = end
			}
			return nil
		}
		s, _, err := r.readOptStr()
		ev.LoRAName = s
		return err
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

// decodeTokens reads token_ids: ints in [0, 2^32), or EAGLE bigrams [a, b]
// (every first element and the last second element are kept).
func (rb *RawBatch) decodeTokens(r *reader, ev *RawEvent) error {
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
		ev.Bigram = true
	} else {
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
			// Inline fast paths for the common encodings.
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
	}
	ev.Tokens = rb.tokens[base:len(rb.tokens):len(rb.tokens)]
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

func (rb *RawBatch) decodeExtraKeys(r *reader, ev *RawEvent) error {
	if r.readNil() {
		ev.ExtraKeys = nil
		return nil
	}
	n, err := r.readArray()
	if err != nil {
		return err
	}
	base := len(rb.extras)
	for i := 0; i < n; i++ {
		if r.readNil() {
			rb.extras = append(rb.extras, ExtraKeys{})
			continue
		}
		m, err := r.readArray()
		if err != nil {
			return err
		}
		ib := len(rb.items)
		for j := 0; j < m; j++ {
			it, err := r.readExtraItem()
			if err != nil {
				return err
			}
			rb.items = append(rb.items, it)
		}
		rb.extras = append(rb.extras, ExtraKeys{Present: true, Items: rb.items[ib:len(rb.items):len(rb.items)]})
	}
	ev.ExtraKeys = rb.extras[base:len(rb.extras):len(rb.extras)]
	if ev.ExtraKeys == nil {
		ev.ExtraKeys = []ExtraKeys{}
	}
	return nil
}

// readExtraItem reads one extra-key item; unknown shapes become ExtraOther.
func (r *reader) readExtraItem() (ExtraKey, error) {
	switch r.peek() {
	case mStr:
		s, _, err := r.readBytes()
		return ExtraKey{Kind: ExtraStr, Str: s}, err
	case mBin:
		s, _, err := r.readBytes()
		return ExtraKey{Kind: ExtraBytes, Str: s}, err
	case mUint, mInt:
		u, _, err := r.readInt()
		return ExtraKey{Kind: ExtraInt, Int: int64(u)}, err
	case mArray:
		save := r.off
		if n, _ := r.readArray(); n == 2 {
			if t := r.peek(); t == mStr || t == mBin {
				id, _, _ := r.readBytes()
				if t := r.peek(); t == mUint || t == mInt {
					u, _, err := r.readInt()
					return ExtraKey{Kind: ExtraPair, Str: id, Int: int64(u)}, err
				}
			}
		}
		r.off = save
	}
	return ExtraKey{Kind: ExtraOther}, r.skip()
}
