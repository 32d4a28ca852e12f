package fleet

import (
	"errors"
	"fmt"
)

// Sentinel errors; check them with errors.Is.
var (
	// ErrInvalid: a registration's field is wrong; the message names it.
	ErrInvalid = errors.New("invalid registration")
	// ErrRegistered: the worker id is registered already (here, or, with
	// a store shared by replicas, by another replica).
	ErrRegistered = errors.New("worker_id is already registered")
	// ErrRemoving: the id's previous subscriptions are still stopping;
	// a registration of it may be tried again shortly.
	ErrRemoving = errors.New("worker is still being removed")
	// ErrNotFound: the worker id is not registered.
	ErrNotFound = errors.New("worker is not registered")
	// ErrOutranked: the worker is registered by a source of higher
	// precedence, which a lower one may not replace or remove.
	ErrOutranked = errors.New("worker is registered by a source of higher precedence")
	// ErrFull: the registry holds its most workers (the router's
	// MaxWorkers).
	ErrFull = errors.New("the registry is full")
	// ErrStore: the store did not save the change, which is not made.
	ErrStore = errors.New("registry not saved")
)

// Error is a fleet error: its message is msg alone (it names the field or
// the worker at fault), and it matches kind and cause with errors.Is.
type Error struct {
	kind  error
	cause error
	msg   string
}

func (e *Error) Error() string { return e.msg }

// Unwrap returns the sentinel and the cause.
func (e *Error) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

func errorf(kind, cause error, format string, args ...any) error {
	return &Error{kind: kind, cause: cause, msg: fmt.Sprintf(format, args...)}
}
