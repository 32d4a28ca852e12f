package state

import (
	"errors"
	"fmt"
)

// Reasons a file is refused. Errors returned by this package wrap one of
// these with the file's path, the offset and the detail.
var (
	// ErrCorrupt: a checksum does not match, or the content is malformed.
	ErrCorrupt = errors.New("file is corrupt")
	// ErrTruncated: the file ends before its end (a cut frame, no trailer).
	ErrTruncated = errors.New("file is truncated")
	// ErrFutureVersion: the file's format version is newer than this build reads.
	ErrFutureVersion = errors.New("format version newer than this build reads")
	// ErrLocked: another router holds the state directory.
	ErrLocked = errors.New("another router holds it")
)

// IsBadFile reports whether err says a file's content is bad (corrupt,
// truncated or of a future version), as opposed to an I/O error.
func IsBadFile(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTruncated) || errors.Is(err, ErrFutureVersion)
}

// Refusal is a file refused on load: its path, why, and where it was moved.
type Refusal struct {
	Path    string // the file as it was named when refused
	Err     error  // why, naming the file; wraps ErrCorrupt, ErrTruncated or ErrFutureVersion, or an I/O error
	MovedTo string // where it is kept; "" if it could not be moved (MoveErr says why)
	MoveErr error
}

func (r Refusal) Error() string {
	s := "refused: " + r.Err.Error()
	if r.MovedTo != "" {
		s += "; kept as " + r.MovedTo
	} else if r.MoveErr != nil {
		s += fmt.Sprintf("; could not move it aside: %v", r.MoveErr)
	}
	return s
}

func (r Refusal) Unwrap() error { return r.Err }

// formatErr is a bad-content error at byte offset off.
func formatErr(kind error, off int64, format string, args ...any) error {
	return fmt.Errorf("offset %d: %s: %w", off, fmt.Sprintf(format, args...), kind)
}
