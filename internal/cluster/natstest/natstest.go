// Package natstest runs a real NATS server with JetStream in the test's
// process, on loopback, for the tests of cluster mode.
package natstest

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is an embedded NATS server that can be stopped and started again
// on the same port and store.
type Server struct {
	t    testing.TB
	dir  string
	port int
	srv  *server.Server
	mod  func(*server.Options)
}

// Start runs a NATS server with JetStream stored in a temporary directory,
// on a free loopback port; it is shut down when the test ends.
func Start(t testing.TB) *Server { return StartWith(t, nil) }

// StartWith is Start with the server's options changed by mod (TLS, say).
func StartWith(t testing.TB, mod func(*server.Options)) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), port: -1, mod: mod}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// Stop shuts the server down (clients see the connection drop).
func (s *Server) Stop() {
	if s.srv == nil {
		return
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.srv = nil
}

// Restart starts the server (again), on the same port and store.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	opts := &server.Options{
		Host: "127.0.0.1", Port: s.port, JetStream: true, StoreDir: s.dir,
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
	if !srv.ReadyForConnections(10 * time.Second) {
		s.t.Fatal("nats server not ready in 10s")
	}
	s.srv = srv
	s.port = srv.Addr().(*net.TCPAddr).Port
}
