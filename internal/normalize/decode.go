package normalize

import (
	"fmt"
	"math"
)

// rawBatch is one decoded payload, before normalization. Byte slices in it
// point into the payload; the other slices into its own memory, which the
// next decodeBatch into it reuses, so that decoding allocates nothing once
// that memory has grown.
type rawBatch struct {
	TS     float64
	DPRank int32 // -1 when absent
	Events []rawEvent

	hashes []uint64
	tokens []uint32
	extras []extraKeys
	items  []extraKey
	rd     reader

	// maxEvents bounds the events of one batch (0: no bound).
	maxEvents int
	// trims release scratch memory an outlier batch grew (see trim).
	trimEvents, trimHashes, trimTokens, trimExtras, trimItems trimmer
}

func (rb *rawBatch) reset() {
	rb.TS = 0
	rb.DPRank = -1
	clear(rb.Events) // drop references into the previous payload
	rb.Events = trim(rb.Events, &rb.trimEvents)
	rb.hashes = trim(rb.hashes, &rb.trimHashes)
	rb.tokens = trim(rb.tokens, &rb.trimTokens)
	clear(rb.extras)
	rb.extras = trim(rb.extras, &rb.trimExtras)
	clear(rb.items)
	rb.items = trim(rb.items, &rb.trimItems)
}

// decodeBatch decodes one msgpack payload into rb, reusing rb's memory. It
// returns a *decodeError when the payload is not an event batch, and rb then
// holds no events; events that are malformed carry their own *eventError in
// rawEvent.Err.
func decodeBatch(payload []byte, rb *rawBatch) error {
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

func (rb *rawBatch) decode(r *reader) error {
	if len(r.b) == 0 {
		return &decodeError{offset: 0, msg: "empty payload"}
	}
	start := r.off
	t, n, err := r.header()
	if err != nil {
		return batchErr("", err)
	}
	switch t {
	case mArray:
		err = rb.decodeArrayBatch(r, start, n)
	case mMap:
		err = rb.decodeMapBatch(r, start, n)
	default:
		return &decodeError{offset: start, msg: fmt.Sprintf("want array or map, got %s", t)}
	}
	if err != nil {
		return err
	}
	if r.off != len(r.b) {
		return &decodeError{offset: r.off, msg: fmt.Sprintf("%d trailing bytes after the batch", len(r.b)-r.off)}
	}
	return nil
}

// decodeArrayBatch decodes [ts, events] or [ts, events, rank, ...] after its
// header (n elements at start).
func (rb *rawBatch) decodeArrayBatch(r *reader, start, n int) error {
	if n < 2 {
		return &decodeError{offset: start, msg: fmt.Sprintf("batch array has %d elements, want [ts, events] or [ts, events, dp_rank]", n)}
	}
	var err error
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
	return nil
}

// decodeMapBatch decodes {"ts": ..., "events": [...], <rank key>: ...} after
// its header (n pairs at start). Keys come in any order and the last
// occurrence of a key wins, as in a decoded map, so the map is scanned for
// the values' offsets first and the values are decoded after.
func (rb *rawBatch) decodeMapBatch(r *reader, start, n int) error {
	tsOff, evOff := -1, -1
	var rankOff [maxRankKeys]int
	for i := range rankOff {
		rankOff[i] = -1
	}
	for i := 0; i < n; i++ {
		kstart := r.off
		if t := r.peek(); t == mArray || t == mMap {
			return &decodeError{offset: kstart, field: "batch", msg: "map key is " + t.String()}
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
		default:
			if k := wire.rankKey(key); k >= 0 {
				rankOff[k] = voff
			}
		}
	}
	end := r.off
	if evOff < 0 {
		return &decodeError{offset: start, field: "events", msg: "batch map has no events"}
	}
	if tsOff >= 0 {
		r.off = tsOff
		var err error
		if rb.TS, err = r.readNumber(); err != nil {
			return batchErr("ts", err)
		}
	}
	r.off = evOff
	if err := rb.decodeEvents(r); err != nil {
		return err
	}
	// The first rank key present and not nil wins.
	for k, off := range rankOff[:len(wire.rankKeys)] {
		if off >= 0 && rb.DPRank < 0 {
			r.off = off
			if err := rb.decodeDPRank(r, wire.rankKeys[k]); err != nil {
				return err
			}
		}
	}
	r.off = end
	return nil
}

// decodeDPRank reads a rank (nil leaves it absent).
func (rb *rawBatch) decodeDPRank(r *reader, field string) error {
	if r.readNil() {
		return nil
	}
	start := r.off
	u, neg, err := r.readInt()
	if err != nil {
		return batchErr(field, err)
	}
	if neg || u > math.MaxInt32 {
		return &decodeError{offset: start, field: field, msg: fmt.Sprintf("rank %d out of range", int64(u))}
	}
	rb.DPRank = int32(u)
	return nil
}

func (rb *rawBatch) decodeEvents(r *reader) error {
	n, err := r.readArray()
	if err != nil {
		return batchErr("events", err)
	}
	if n > len(r.b)-r.off {
		return &decodeError{offset: r.off, field: "events", msg: fmt.Sprintf("%d events claimed, truncated msgpack", n)}
	}
	if rb.maxEvents > 0 && n > rb.maxEvents {
		return &decodeError{offset: r.off, field: "events", msg: fmt.Sprintf("%d events, more than the %d a batch may have", n, rb.maxEvents)}
	}
	for i := 0; i < n; i++ {
		rb.Events = append(rb.Events, rawEvent{BlockSize: -1})
		if err := rb.decodeEvent(r, &rb.Events[len(rb.Events)-1], i); err != nil {
			return batchErr(fmt.Sprintf("events[%d]", i), err)
		}
	}
	return nil
}
