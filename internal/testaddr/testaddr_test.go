//go:build unix

package testaddr

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestRefused: a connection to the address is refused, and the port cannot
// be taken by a listener while it is held; once closed, it can.
func TestRefused(t *testing.T) {
	r, err := NewRefused()
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", r.Addr()); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial %s: %v; want connection refused", r.Addr(), err)
	}
	if l, err := net.Listen("tcp", r.Addr()); err == nil {
		l.Close()
		t.Fatalf("listened on the held port %s", r.Addr())
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", r.Addr())
	if err != nil {
		t.Fatalf("listen on the released port: %v", err)
	}
	l.Close()
}
