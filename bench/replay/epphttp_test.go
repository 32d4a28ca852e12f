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

// TestPlayThroughHTTPGateway replays a trace as HTTP requests through
// bench's gateway and an endpoint picker (in process here; kvbench runs the
// router binary) to the engines' OpenAI fronts: every request reaches the
// engine the picker chose with the tokens it was sent with, every response
// reaches the client whole, and the picker's marks leave no request active.
func TestPlayThroughHTTPGateway(t *testing.T) {
	fleet, err := harness.StartFleet(harness.FleetConfig{Engines: 2, Engine: engine.Config{CapacityBlocks: 1000, PrefillPerToken: time.Millisecond, DecodePerToken: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	srv, rt, addr := startPicker(t)
	side, err := StartHTTPSide(fleet, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	for i, e := range fleet.Engines {
		w := &kvrouterv1.Worker{WorkerId: e.ID(), Model: "m", Endpoint: "http://" + side.Endpoints()[i], BlockSize: 16}
		if err := srv.Register(w, server.SourceAPI, false); err != nil {
			t.Fatal(err)
		}
	}

	pr, err := Play(context.Background(), PlayConfig{
		Fleet: fleet, Requests: smallTrace(), Clock: Clock{T0: time.Now(), SpeedUp: 100},
		Choose: side.Chooser("m"), Router: side, IDPrefix: "t-",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.TTFT) != 20 || pr.ChooseErrors != 0 || len(pr.RouteLatency) != 20 || pr.MarkErrors != 0 {
		t.Fatalf("ttft %d, choose errors %d, routed %d, mark errors %d (%s)", len(pr.TTFT), pr.ChooseErrors, len(pr.RouteLatency), pr.MarkErrors, pr.FirstError)
	}
	if st := side.GatewayStats(); st.Picked != 20 || st.FailedOpen != 0 || st.ProtocolErrors != 0 {
		t.Fatalf("gateway stats %+v: want 20 picked", st)
	}
	if n := rt.ActiveRequests(); n != 0 {
		t.Fatalf("%d requests still active: the picker's marks did not finish them", n)
	}
	if tot := fleet.Totals(); tot.CachedBlocks < 18*32 {
		t.Fatalf("cached %d blocks, want at least %d", tot.CachedBlocks, 18*32)
	}
}
