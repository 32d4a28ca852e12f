package epp

import (
	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
)

// FleetFunc is the router's registry as a Fleet: the function returns it,
// nil before the router starts (server.Server.Fleet).
type FleetFunc func() *fleet.Fleet

// Worker implements Fleet.
func (f FleetFunc) Worker(id string) *kvrouterv1.Worker {
	fl := f()
	if fl == nil {
		return nil
	}
	w, _, ok := fl.Registered(id)
	if !ok {
		return nil
	}
	return w
}

// Workers implements Fleet.
func (f FleetFunc) Workers() []*kvrouterv1.Worker {
	fl := f()
	if fl == nil {
		return nil
	}
	regs := fl.List("")
	out := make([]*kvrouterv1.Worker, len(regs))
	for i, r := range regs {
		out[i] = r.Worker
	}
	return out
}
