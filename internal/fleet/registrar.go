package fleet

import (
	"context"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// Registrar is what every source of workers calls: the config file, the
// Registry API's owner, discovery. *Fleet implements it.
type Registrar interface {
	// Upsert registers w under source, or replaces the registration with the same worker_id
	// if it changed (same id and same fields: no-op).
	Upsert(ctx context.Context, w *kvrouterv1.Worker, source string) error
	// Remove unregisters workerID if it was registered by source.
	Remove(ctx context.Context, workerID, source string) error
}

var _ Registrar = (*Fleet)(nil)
