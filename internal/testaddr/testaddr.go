// Package testaddr gives tests a loopback address where a connection is
// refused, held for them so that nothing else can start listening there.
//
// A listener bound on port 0 and closed leaves a port where nothing listens
// for a moment only: any process on the machine (another test's router, an
// outbound connection) may take it before the test dials it. A socket bound
// and never listening keeps the port and refuses every connection.
package testaddr

import "fmt"

// Refused is a loopback TCP address where connections are refused, for as
// long as it is not closed.
type Refused struct {
	addr  string
	close func() error
}

// NewRefused binds a TCP socket on a loopback port the kernel picks and
// does not listen on it.
func NewRefused() (*Refused, error) {
	addr, closeFn, err := bindNoListen()
	if err != nil {
		return nil, fmt.Errorf("testaddr: %w", err)
	}
	return &Refused{addr: addr, close: closeFn}, nil
}

// Addr is host:port.
func (r *Refused) Addr() string { return r.addr }

// Close releases the port.
func (r *Refused) Close() error { return r.close() }
