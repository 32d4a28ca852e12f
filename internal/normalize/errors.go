package normalize

import "fmt"

// decodeError says why a payload is not an event batch at all: Normalize
// returns it and the whole batch is dropped.
type decodeError struct {
	offset int    // byte offset in the payload, -1 when unknown
	field  string // the batch field or event, "" for the batch itself
	msg    string
}

// Error describes the problem and its byte offset.
func (e *decodeError) Error() string {
	s := "decode batch: "
	if e.field != "" {
		s += e.field + ": "
	}
	s += e.msg
	if e.offset >= 0 {
		s += fmt.Sprintf(" at byte %d", e.offset)
	}
	return s
}

// batchErr converts a reader error at the batch level into a decodeError.
func batchErr(field string, err error) error {
	switch e := err.(type) {
	case *structError:
		return &decodeError{offset: e.off, field: field, msg: e.msg}
	case *typeError:
		return &decodeError{offset: e.off, field: field, msg: fmt.Sprintf("want %s, got %s", e.want, e.got)}
	}
	return &decodeError{offset: -1, field: field, msg: err.Error()}
}

// eventError is a per-event decode or validation error: that event is
// skipped, the rest of the batch applies. Batch.Errors holds them.
type eventError struct {
	index  int    // the event's index in the batch
	tag    string // the event's tag, "" when unreadable
	field  string // the offending field
	offset int    // byte offset in the payload, -1 when unknown
	msg    string
}

// Error names the event, its tag, the field and the byte offset.
func (e *eventError) Error() string {
	s := fmt.Sprintf("event %d", e.index)
	if e.tag != "" {
		s += " (" + e.tag + ")"
	}
	if e.field != "" {
		s += ": " + e.field
	}
	s += ": " + e.msg
	if e.offset >= 0 {
		s += fmt.Sprintf(" at byte %d", e.offset)
	}
	return s
}

// noField is eventErr's field for errors that are not about one field.
const noField = numFields

// eventErr converts a reader error in field f (or noField) of event idx
// into an eventError.
func eventErr(idx int, ev *rawEvent, f field, err error) *eventError {
	e := &eventError{index: idx, tag: string(ev.Name), offset: -1}
	if f != noField {
		e.field = fieldNames[f]
	}
	switch te := err.(type) {
	case *typeError:
		e.offset = te.off
		e.msg = fmt.Sprintf("want %s, got %s", te.want, te.got)
	case *valueError:
		e.offset = te.off
		e.msg = te.msg
	default:
		e.msg = err.Error()
	}
	return e
}
