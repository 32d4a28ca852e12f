package fleet

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// upsertTries bounds how often Upsert looks again after a registration of
// the same id raced it (ErrRegistered from a Register of another caller
// between Upsert's check and its change).
const upsertTries = 3

// Upsert registers w under source, or replaces the registration of its id
// if it changed; the same fields under the same source are a no-op, the
// same fields claimed by a source of higher precedence change only the
// recorded source. A registration by a source of higher precedence than
// source is left alone (ErrOutranked). The change is persisted. A
// registration refused because the id's previous subscriptions are still
// stopping (ErrRemoving) is tried again until ctx is done.
func (f *Fleet) Upsert(ctx context.Context, w *kvrouterv1.Worker, source string) error {
	src := Source(source)
	if !src.Valid() {
		return errorf(ErrInvalid, nil, "source %q: want %s, %s or %s", source, SourceConfig, SourceAPI, SourceDiscovery)
	}
	if err := Validate(w); err != nil {
		return err
	}
	f.upsertMu.Lock()
	defer f.upsertMu.Unlock()
	var err error
	for range upsertTries {
		err = RetryWhileRemoving(ctx, func() error { return f.upsertOnce(w, src) })
		if !errors.Is(err, ErrRegistered) {
			return err
		}
	}
	return err
}

func (f *Fleet) upsertOnce(w *kvrouterv1.Worker, src Source) error {
	cur, curSrc, ok := f.Registered(w.WorkerId)
	if !ok {
		return f.register(w, src, putCreate)
	}
	if curSrc.Outranks(src) {
		return errorf(ErrOutranked, nil, "worker %q is registered by %s, which %s may not replace", w.WorkerId, curSrc, src)
	}
	want := normalized(w)
	if proto.Equal(cur, want) {
		if curSrc == src {
			return nil
		}
		return f.claim(want, src)
	}
	if err := f.Unregister(w.WorkerId, false); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	// The store still holds the old registration: the replacement
	// overwrites it, or, if the new one fails, a restart restores the old.
	return f.register(w, src, putReplace)
}

// claim records src as the source of the registration w, unchanged
// otherwise.
func (f *Fleet) claim(w *kvrouterv1.Worker, src Source) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	reg, ok := f.workers[w.WorkerId]
	if !ok || !proto.Equal(reg.Worker, w) {
		return errorf(ErrRegistered, nil, "worker.worker_id %q changed while being claimed by %s", w.WorkerId, src)
	}
	if err := f.persist(reg.Worker, src, putReplace); err != nil {
		return err
	}
	f.workers[w.WorkerId] = Registration{Worker: reg.Worker, Source: src}
	f.log.Info("worker claimed", "worker", w.WorkerId, "source", src, "was", reg.Source)
	return nil
}

// Remove unregisters workerID, and deletes it from the store, if it was
// registered by source or by a source of lower precedence: a worker of a
// higher source is left (ErrOutranked), and one not registered is
// ErrNotFound.
func (f *Fleet) Remove(_ context.Context, workerID, source string) error {
	src := Source(source)
	if !src.Valid() {
		return errorf(ErrInvalid, nil, "source %q: want %s, %s or %s", source, SourceConfig, SourceAPI, SourceDiscovery)
	}
	f.upsertMu.Lock()
	defer f.upsertMu.Unlock()
	_, curSrc, ok := f.Registered(workerID)
	switch {
	case !ok:
		return errorf(ErrNotFound, nil, "worker_id %q is not registered", workerID)
	case curSrc.Outranks(src):
		return errorf(ErrOutranked, nil, "worker %q is registered by %s, which %s may not remove", workerID, curSrc, src)
	}
	return f.Unregister(workerID, true)
}
