package epp

import "errors"

// Errors a request is refused with, each answered with its HTTP status
// (httpStatus).
var (
	// ErrBadRequest: the body is not an OpenAI request the picker can read.
	ErrBadRequest = errors.New("bad request")
	// ErrBodyTooLarge: the body is over Config.MaxBodyBytes.
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrNoEndpoint: no endpoint is eligible (none in the subset hint,
	// none registered, the router not ready).
	ErrNoEndpoint = errors.New("no endpoint available")
	// ErrBusy: every eligible worker is over its busy thresholds, or the
	// picker holds Config.MaxStreams streams.
	ErrBusy = errors.New("every endpoint is busy")
	// ErrUnknownModel: no registered worker serves the request's model.
	ErrUnknownModel = errors.New("no worker serves the model")
	// ErrInternal: the router failed otherwise.
	ErrInternal = errors.New("internal error")
)
