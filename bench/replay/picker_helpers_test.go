package replay

import (
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/kvrouter/kvrouter/internal/epp"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
)

// startPicker runs a router and its endpoint picker in process (kvbench
// runs the binary) and returns the router's server, to register workers
// with, its router, and the picker's address. Everything stops with the
// test.
func startPicker(t *testing.T) (*server.Server, *scoring.Router, string) {
	t.Helper()
	idx := radix.New(radix.Config{})
	ing, err := ingest.New(ingest.Config{Index: idx, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ing.Close() })
	rt, err := scoring.New(scoring.Config{Index: idx, BlockSize: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Router: rt, Ingest: ing, Index: idx})
	if err != nil {
		t.Fatal(err)
	}
	p, err := epp.New(epp.Config{Router: srv, Fleet: epp.FleetFunc(srv.Fleet)})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	p.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return srv, rt, lis.Addr().String()
}
