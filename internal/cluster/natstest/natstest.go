// Package natstest runs a real NATS server with JetStream in the test's
// process, on loopback, for the tests of cluster mode.
package natstest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is an embedded NATS server that can be stopped and started again
// behind the same address. The address is a listener the test binds once,
// on a port the kernel picks, and holds until the test ends; it forwards each
// connection to the server of the moment. A server restarted on its old port
// instead could find that port taken by then, by anything on the machine.
type Server struct {
	t   testing.TB
	dir string
	ln  net.Listener
	mod func(*server.Options)

	mu      sync.Mutex
	srv     *server.Server
	backend string                // the running server's address; "" while stopped
	conns   map[net.Conn]struct{} // both ends of every forwarded connection
}

// Start runs a NATS server with JetStream stored in a temporary directory,
// on a free loopback port; it is shut down when the test ends.
func Start(t testing.TB) *Server { return StartWith(t, nil) }

// StartWith is Start with the server's options changed by mod (TLS, say).
func StartWith(t testing.TB, mod func(*server.Options)) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("nats front listener: %v", err)
	}
	s := &Server{t: t, dir: t.TempDir(), ln: ln, mod: mod, conns: map[net.Conn]struct{}{}}
	go s.accept()
	t.Cleanup(func() {
		s.Stop()
		ln.Close()
	})
	s.Restart()
	return s
}

// URL is the server's client URL.
func (s *Server) URL() string { return "nats://" + s.ln.Addr().String() }

// Stop shuts the server down (clients see the connection drop, and their
// connections are closed as soon as they are accepted until Restart).
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv, s.backend = nil, ""
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Shutdown()
	srv.WaitForShutdown()
}

// Restart starts the server (again), on the same store, behind the same
// address.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	opts := &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: s.dir,
		NoLog: true, NoSigs: true, ServerName: "kvrouter-test",
	}
	if s.mod != nil {
		s.mod(opts)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		s.t.Fatalf("nats server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(time.Minute) {
		s.t.Fatal("nats server not ready in a minute")
	}
	s.mu.Lock()
	s.srv, s.backend = srv, srv.Addr().String()
	s.mu.Unlock()
}

// accept forwards each connection to the front to the running server.
func (s *Server) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // the listener closed at the test's end
		}
		s.mu.Lock()
		backend := s.backend
		s.mu.Unlock()
		if backend == "" {
			c.Close() // stopped: the client sees its connection fail
			continue
		}
		go s.forward(c, backend)
	}
}

func (s *Server) forward(c net.Conn, backend string) {
	b, err := net.Dial("tcp", backend)
	if err != nil {
		c.Close()
		return
	}
	s.mu.Lock()
	if s.backend != backend { // stopped (or restarted) while dialling
		s.mu.Unlock()
		c.Close()
		b.Close()
		return
	}
	s.conns[c], s.conns[b] = struct{}{}, struct{}{}
	s.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(b, c)
	go pipe(c, b)
	<-done // either side ended: end both
	c.Close()
	b.Close()
	<-done
	s.mu.Lock()
	delete(s.conns, c)
	delete(s.conns, b)
	s.mu.Unlock()
}
