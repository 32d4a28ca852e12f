package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The registry is the bucket <prefix>-registry: one key per worker id (the
// id in unpadded base64url, which KV keys allow whatever the id holds), the
// value the caller's encoding of the registration. The bucket's revision
// orders changes: of two replicas creating the same worker id at once,
// the first write wins and the second gets ErrWorkerExists.

// ErrWorkerExists is a CreateWorker of an id the bucket holds.
var ErrWorkerExists = errors.New("worker id is registered already (in the cluster registry)")

// ErrNotConnected is a registry write while the NATS connection is down.
// It is refused at once: the write would wait in the reconnect buffer,
// time out, and still be applied when the connection is back, so that a
// registration reported failed would appear on every replica later.
var ErrNotConnected = errors.New("cluster: NATS is not connected; the registry is read-only until it is back")

func workerKey(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

func workerID(key string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(key)
	if err != nil {
		return "", fmt.Errorf("registry key %q: %w", key, err)
	}
	return string(b), nil
}

// CreateWorker writes a new registration; it returns ErrWorkerExists when
// the id is registered, and the entry's revision.
func (n *Node) CreateWorker(ctx context.Context, id string, value []byte) (uint64, error) {
	if !n.Connected() {
		return 0, ErrNotConnected
	}
	rev, err := n.kv.Create(ctx, workerKey(id), value)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%w: %q", ErrWorkerExists, id)
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: registry create %q: %w", id, err)
	}
	return rev, nil
}

// PutWorker writes a registration, replacing any (a config file's workers,
// which every replica declares alike).
func (n *Node) PutWorker(ctx context.Context, id string, value []byte) (uint64, error) {
	if !n.Connected() {
		return 0, ErrNotConnected
	}
	rev, err := n.kv.Put(ctx, workerKey(id), value)
	if err != nil {
		return 0, fmt.Errorf("cluster: registry put %q: %w", id, err)
	}
	return rev, nil
}

// DeleteWorker removes a registration.
func (n *Node) DeleteWorker(ctx context.Context, id string) error {
	if !n.Connected() {
		return ErrNotConnected
	}
	if err := n.kv.Delete(ctx, workerKey(id)); err != nil {
		return fmt.Errorf("cluster: registry delete %q: %w", id, err)
	}
	return nil
}

// WorkerEvent is a registry change: a registration put (Value) or deleted.
type WorkerEvent struct {
	ID       string
	Value    []byte
	Deleted  bool
	Revision uint64
}

// WatchWorkers calls fn with every registration in the bucket, then closes
// loaded, then calls fn with every change until the node closes. fn runs
// on one goroutine, in revision order. After a reconnect the watch starts
// again from the bucket's content (the server may have lost the watch's
// consumer), so fn sees some registrations again: it must be idempotent.
func (n *Node) WatchWorkers(fn func(WorkerEvent)) (loaded <-chan struct{}, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := n.kv.WatchAll(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cluster: watch registry: %w", err)
	}
	done := make(chan struct{})
	n.wg.Go(func() {
		defer cancel()
		first := true
		for w != nil {
			again := n.watch(w, fn, func() {
				if first {
					first = false
					close(done)
				}
			})
			_ = w.Stop()
			if !again {
				break
			}
			w = n.rewatchAll(ctx)
		}
		if first {
			close(done)
		}
	})
	return done, nil
}

// watch passes w's entries to fn until the node stops (false) or the
// connection came back (true: watch again).
func (n *Node) watch(w jetstream.KeyWatcher, fn func(WorkerEvent), loaded func()) bool {
	for {
		select {
		case <-n.stop:
			return false
		case <-n.rewatch:
			return true
		case e, ok := <-w.Updates():
			if !ok {
				return true
			}
			if e == nil {
				loaded()
				continue
			}
			id, err := workerID(e.Key())
			if err != nil {
				n.log.Warn("registry entry skipped", "err", err)
				continue
			}
			ev := WorkerEvent{ID: id, Revision: e.Revision()}
			switch e.Operation() {
			case jetstream.KeyValuePut:
				ev.Value = e.Value()
				n.metrics.registry.WithLabelValues("put").Inc()
			default:
				ev.Deleted = true
				n.metrics.registry.WithLabelValues("delete").Inc()
			}
			fn(ev)
		}
	}
}

// rewatchAll starts the watch again, retrying until it works or the node
// stops (nil).
func (n *Node) rewatchAll(ctx context.Context) jetstream.KeyWatcher {
	for {
		w, err := n.kv.WatchAll(ctx)
		if err == nil {
			return w
		}
		n.log.Warn("registry watch not restarted; retrying", "err", err)
		select {
		case <-n.stop:
			return nil
		case <-time.After(time.Second):
		}
	}
}
