package scoring

import (
	"errors"
	"fmt"
)

// Error classes returned (wrapped, with the field or reason) by the Router.
var (
	ErrInvalidArgument   = errors.New("invalid argument")
	ErrNotFound          = errors.New("not found")
	ErrUnavailable       = errors.New("unavailable")
	ErrAlreadyExists     = errors.New("already exists")
	ErrResourceExhausted = errors.New("resource exhausted")
)

// Names of the limits a LimitError reports (the server counts refusals by
// them in kvrouter_rpc_rejected_total{reason}).
const (
	LimitPromptTokens   = "prompt_tokens"    // Config.MaxPromptTokens (token_ids, or block_hashes in blocks)
	LimitMMItems        = "mm_items"         // Config.MaxMMItems
	LimitRequestIDBytes = "request_id_bytes" // Config.MaxRequestIDBytes
	LimitActiveRequests = "active_requests"  // Config.MaxActiveRequests
	LimitWorkers        = "workers"          // Config.MaxWorkers
	LimitDPSize         = "dp_size"          // kv.MaxDPSize
	// LimitBusy: every worker of the model is over a busy threshold
	// (Config.MaxActivePrefillTokens, Config.MaxActiveDecodeBlocks).
	LimitBusy = "busy"
)

// LimitError is a call refused by one of the Router's limits. It wraps
// ErrInvalidArgument (a request over a per-request bound) or
// ErrResourceExhausted (a table that is full), and its message names the
// field and the limit.
type LimitError struct {
	// Limit is one of the Limit* names.
	Limit string
	class error
	msg   string
}

func (e *LimitError) Error() string { return e.class.Error() + ": " + e.msg }

// Unwrap returns the error class: ErrInvalidArgument or ErrResourceExhausted.
func (e *LimitError) Unwrap() error { return e.class }

func limitError(limit string, class error, format string, args ...any) error {
	return &LimitError{Limit: limit, class: class, msg: fmt.Sprintf(format, args...)}
}
