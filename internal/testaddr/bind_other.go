//go:build !unix

package testaddr

import (
	"errors"
	"runtime"
)

func bindNoListen() (string, func() error, error) {
	return "", nil, errors.New("a bound, non-listening socket is not implemented on " + runtime.GOOS)
}
