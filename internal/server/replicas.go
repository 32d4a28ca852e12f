package server

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// ErrRegistered is what a RegistryStore's Put returns (wrapped) when the
// store, shared by replicas, already holds the worker id: another replica
// registered it first. The registration is refused as a duplicate.
var ErrRegistered = errors.New("worker_id is already registered")

// storeError is the status of a registration the store refused.
func storeError(err error) error {
	if errors.Is(err, ErrRegistered) {
		return status.Errorf(codes.InvalidArgument, "worker.worker_id: %v", err)
	}
	return status.Errorf(codes.Unavailable, "registry not saved, worker not registered: %v", err)
}

// Registered returns the registration of worker id, if any: replicas
// compare it with the shared registry's.
func (s *Server) Registered(id string) (*kvrouterv1.Worker, Source, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reg, ok := s.workers[id]
	if !ok {
		return nil, "", false
	}
	return cloneWorker(reg.w), reg.source, true
}
