//go:build unix

package testaddr

import (
	"fmt"
	"syscall"
)

// bindNoListen binds a socket without SO_REUSEADDR (so no other socket can
// share the port) and never calls listen (so a connection is refused).
func bindNoListen() (string, func() error, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return "", nil, fmt.Errorf("socket: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("bind: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("getsockname: %w", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("getsockname: %T, want an IPv4 address", sa)
	}
	return fmt.Sprintf("127.0.0.1:%d", in4.Port), func() error { return syscall.Close(fd) }, nil
}
