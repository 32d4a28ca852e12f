//go:build !unix

package state

import (
	"errors"
	"os"
)

func flock(*os.File) (bool, error) {
	return false, errors.New("file locks are not supported on this platform")
}

func funlock(*os.File) error { return nil }
