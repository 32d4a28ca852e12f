package scoring

import "errors"

// Error classes returned (wrapped, with the field or reason) by the Router.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrNotFound        = errors.New("not found")
	ErrUnavailable     = errors.New("unavailable")
	ErrAlreadyExists   = errors.New("already exists")
)
