package replay

import (
	"context"
	"testing"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/harness"
)

// TestGatewayChooser: a choice through the gateway is the fleet's engine
// the replica named, routed, with the replica's view of the prompt; a
// worker the fleet does not have is an error, not an engine.
func TestGatewayChooser(t *testing.T) {
	fleet, err := harness.StartFleet(harness.FleetConfig{Engines: 1, Engine: engine.Config{CapacityBlocks: 10}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	_, _, a := serveFake(t) // (it answers engine-01, then engine-00, and so on)
	g, err := harness.NewGateway(harness.GatewayConfig{Addrs: []string{a}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	choose := GatewayChooser(g, fleet, "m")
	if _, err := choose(context.Background(), 0, make([]uint32, 48), "ra"); err == nil {
		t.Fatal("a worker outside the fleet: no error")
	}
	c, err := choose(context.Background(), 1, make([]uint32, 48), "rb")
	if err != nil {
		t.Fatal(err)
	}
	if c.Engine != 0 || !c.Routed || c.PromptBlocks != 3 {
		t.Fatalf("choice %+v, want engine 0, routed, 3 prompt blocks", c)
	}
}
