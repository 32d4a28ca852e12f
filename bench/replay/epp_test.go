package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"context"
	"testing"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/internal/server"
)

// TestPlayThroughEPP replays a trace through an endpoint picker in front
// of a router (in process here; kvbench runs the binary): every request is
// routed by the picker, the gateway sends no mark, and the picker's marks
// from the response path leave no request active at the end.
func TestPlayThroughEPP(t *testing.T) {
	fleet, err := harness.StartFleet(harness.FleetConfig{Engines: 2, Engine: engine.Config{CapacityBlocks: 1000, PrefillPerToken: time.Millisecond, DecodePerToken: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	srv, rt, addr := startPicker(t)
	for _, e := range fleet.Engines {
		w := &kvrouterv1.Worker{WorkerId: e.ID(), Model: "m", Endpoint: "sim://" + e.ID(), BlockSize: 16}
		if err := srv.Register(w, server.SourceAPI, false); err != nil {
			t.Fatal(err)
		}
	}
	gw, err := NewEPPGateway(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()

	pr, err := Play(context.Background(), PlayConfig{
		Fleet: fleet, Requests: smallTrace(), Clock: Clock{T0: time.Now(), SpeedUp: 100},
		Choose: gw.Chooser(fleet, "m"), Router: gw, IDPrefix: "t-",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.TTFT) != 20 || pr.ChooseErrors != 0 || len(pr.RouteLatency) != 20 || pr.MarkErrors != 0 {
		t.Fatalf("ttft %d, choose errors %d, routed %d, mark errors %d (%s)", len(pr.TTFT), pr.ChooseErrors, len(pr.RouteLatency), pr.MarkErrors, pr.FirstError)
	}
	if n := rt.ActiveRequests(); n != 0 {
		t.Fatalf("%d requests still active: the picker's marks did not finish them", n)
	}
	// All share id 1 (32 blocks); the router keeps them together.
	if tot := fleet.Totals(); tot.CachedBlocks < 18*32 {
		t.Fatalf("cached %d blocks, want at least %d", tot.CachedBlocks, 18*32)
	}
}
