package normalize

// rawEvent is one decoded engine event, before normalization. Byte slices
// point into the payload; other slices into the rawBatch's memory.
type rawEvent struct {
	Tag  eventTag
	Name []byte // the tag as sent
	// Err is the event's decode error; the other fields are then incomplete.
	Err *eventError

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
	ExtraKeys     []extraKeys // nil when absent
	HasGroup      bool
	Group         uint32
	HasKind       bool
	SpecKind      []byte // kv_cache_spec_kind
	HasWindow     bool
	SlidingWindow int64
	Locality      []byte
}

// decodeEvent decodes one event in a single pass. It returns only structural
// errors (the payload is not msgpack); field problems go to ev.Err, after
// which the rest of the value is skipped and validated.
func (rb *rawBatch) decodeEvent(r *reader, ev *rawEvent, idx int) error {
	switch r.peek() {
	case mArray:
		return rb.decodeArrayEvent(r, ev, idx)
	case mMap:
		return rb.decodeMapEvent(r, ev, idx)
	}
	start, t := r.off, r.peek()
	if err := r.skip(); err != nil {
		return err
	}
	ev.Err = eventErr(idx, ev, noField, &typeError{start, "array or map event", t})
	return nil
}

// decodeArrayEvent decodes [tag, field, ...]: the fields are at the
// positions wire.arrayFields gives for the tag; missing trailing fields keep
// their defaults and extra ones are skipped.
func (rb *rawBatch) decodeArrayEvent(r *reader, ev *rawEvent, idx int) error {
	start := r.off
	n, err := r.readArray()
	if err != nil {
		return err
	}
	if n == 0 {
		ev.Err = eventErr(idx, ev, noField, &valueError{start, "empty event array"})
		return nil
	}
	name, err := r.readStr()
	if err != nil {
		if isStructural(err) {
			return err
		}
		te := err.(*typeError)
		ev.Err = eventErr(idx, ev, noField, &valueError{te.off, "tag: want str, got " + te.got.String()})
		return r.skipN(n) // the tag and the fields
	}
	ev.Name = name
	ev.Tag = tagOf(name)
	fields := wire.arrayFields[ev.Tag]
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
}

// decodeMapEvent decodes {"type": tag, name: value, ...}. The tag may come
// after the fields, so every key that names a field of any tag is decoded as
// it comes (a later duplicate replaces an earlier one, as in a decoded map);
// once the tag is known, the fields that do not belong to it are dropped,
// and the error reported is the first in field order among those that do.
func (rb *rawBatch) decodeMapEvent(r *reader, ev *rawEvent, idx int) error {
	start := r.off
	n, err := r.readMap()
	if err != nil {
		return err
	}
	var errs [numFields]error
	var failed fieldSet
	typeOff := -1
	for i := 0; i < n; i++ {
		key, err := r.readKey()
		if err != nil {
			return err
		}
		voff := r.off
		if string(key) == mapTagKey {
			typeOff = voff
			if err := r.skip(); err != nil {
				return err
			}
			continue
		}
		f, ok := wire.fieldOfKey(key)
		if !ok {
			if err := r.skip(); err != nil {
				return err
			}
			continue
		}
		err = rb.decodeField(r, ev, f)
		errs[f] = err
		failed &^= 1 << f
		if err != nil {
			if isStructural(err) {
				return err
			}
			failed |= 1 << f
			r.off = voff
			if err := r.skip(); err != nil {
				return err
			}
		}
	}
	end := r.off
	if typeOff < 0 {
		ev.Err = eventErr(idx, ev, noField, &valueError{start, `event map has no "` + mapTagKey + `"`})
		return nil
	}
	r.off = typeOff
	name, err := r.readStr()
	r.off = end
	if err != nil {
		te := err.(*typeError)
		ev.Err = eventErr(idx, ev, noField, &valueError{te.off, mapTagKey + ": want str, got " + te.got.String()})
		return nil
	}
	ev.Name = name
	ev.Tag = tagOf(name)
	keep := wire.mapFields[ev.Tag]
	ev.keepFields(keep)
	for f := field(0); f < numFields; f++ {
		if failed.has(f) && keep.has(f) {
			ev.Err = eventErr(idx, ev, f, errs[f])
			break
		}
	}
	return nil
}

// keepFields resets the fields a map event carried that are not in keep
// (those that do not belong to its tag).
func (ev *rawEvent) keepFields(keep fieldSet) {
	if keep == allFields {
		return
	}
	for f := field(0); f < numFields; f++ {
		if !keep.has(f) {
			ev.resetField(f)
		}
	}
}

// resetField sets field f back to its default (absent).
func (ev *rawEvent) resetField(f field) {
	switch f {
	case fBlockHashes:
		ev.BlockHashes = nil
	case fParent:
		ev.HasParent, ev.Parent = false, 0
	case fTokens:
		ev.Tokens, ev.Bigram = nil, false
	case fBlockSize:
		ev.BlockSize = -1
	case fLoRAID:
	case fMedium:
		ev.Medium = nil
	case fLoRAName:
		ev.LoRAName = nil
	case fExtraKeys:
		ev.ExtraKeys = nil
	case fGroup:
		ev.HasGroup, ev.Group = false, 0
	case fKind:
		ev.HasKind, ev.SpecKind = false, nil
	case fWindow:
		ev.HasWindow, ev.SlidingWindow = false, 0
	case fLocality:
		ev.Locality = nil
	case fCacheSalt:
		ev.HasCacheSalt, ev.CacheSalt = false, nil
	}
}
