package server

import (
	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
)

// ErrRegistered is what a RegistryStore's Put returns (wrapped) when the
// store, shared by replicas, already holds the worker id: another replica
// registered it first. The registration is refused as a duplicate.
var ErrRegistered = fleet.ErrRegistered

// Registered returns the registration of worker id, if any: replicas
// compare it with the shared registry's.
func (s *Server) Registered(id string) (*kvrouterv1.Worker, Source, bool) {
	if !s.ready.Load() {
		return nil, "", false
	}
	return s.fleet.Registered(id)
}
