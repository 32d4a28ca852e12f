package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
)

// A registry value is a version byte, the source (length byte, bytes) and
// the kvrouter.v1.Worker.
const registryValueVersion = 1

// ErrBadRegistration is a registry value that does not decode.
var ErrBadRegistration = errors.New("registry value: not a version 1 registration")

// EncodeWorker is the registry bucket's value for w registered by source.
func EncodeWorker(w *kvrouterv1.Worker, source fleet.Source) ([]byte, error) {
	pb, err := proto.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode registration: %w", err)
	}
	if len(source) > 255 {
		return nil, fmt.Errorf("encode registration: source %q too long", source)
	}
	b := append([]byte{registryValueVersion, byte(len(source))}, source...)
	return append(b, pb...), nil
}

// DecodeWorker reads a registry bucket's value; errors wrap
// ErrBadRegistration.
func DecodeWorker(b []byte) (*kvrouterv1.Worker, fleet.Source, error) {
	if len(b) < 2 || b[0] != registryValueVersion || len(b) < 2+int(b[1]) {
		return nil, "", ErrBadRegistration
	}
	src := fleet.Source(b[2 : 2+int(b[1])])
	w := &kvrouterv1.Worker{}
	if err := proto.Unmarshal(b[2+int(b[1]):], w); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrBadRegistration, err)
	}
	return w, src, nil
}

// Registry is a fleet.Store on the registry bucket. Put of a config
// file's worker, which every replica declares alike, overwrites; Put of
// any other source creates the key, refused with fleet.ErrRegistered when
// another replica holds the id (the bucket's revision decides). Replace
// overwrites.
type Registry struct {
	Node *Node
	// Timeout bounds each bucket write.
	Timeout time.Duration
}

var _ fleet.Replacer = Registry{}

// Put writes w's registration by source.
func (r Registry) Put(w *kvrouterv1.Worker, source fleet.Source) error {
	if source == fleet.SourceConfig {
		return r.Replace(w, source)
	}
	v, err := EncodeWorker(w, source)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.Timeout)
	defer cancel()
	_, err = r.Node.CreateWorker(ctx, w.WorkerId, v)
	if errors.Is(err, ErrWorkerExists) {
		return fmt.Errorf("%w (by another replica)", fleet.ErrRegistered)
	}
	return err
}

// Replace overwrites the id's registration with w's by source.
func (r Registry) Replace(w *kvrouterv1.Worker, source fleet.Source) error {
	v, err := EncodeWorker(w, source)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.Timeout)
	defer cancel()
	_, err = r.Node.PutWorker(ctx, w.WorkerId, v)
	return err
}

// Delete removes id's registration.
func (r Registry) Delete(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.Timeout)
	defer cancel()
	return r.Node.DeleteWorker(ctx, id)
}

// RemoveWait bounds how long a registration from the bucket waits for this
// replica's removal of the same id to finish: longer than ingest's stop
// timeout.
const RemoveWait = 15 * time.Second

// FollowRegistry registers every worker of the bucket in f, then follows
// the bucket's changes; it returns once the bucket's content is registered
// (or timeout passes). The bucket is the registry: a local registration
// that differs from the bucket's is replaced, without writing back.
func (n *Node) FollowRegistry(f *fleet.Fleet, timeout time.Duration, log *slog.Logger) error {
	loaded, err := n.WatchWorkers(func(ev WorkerEvent) { n.applyWorker(f, ev, log) })
	if err != nil {
		return err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-loaded:
		return nil
	case <-t.C:
		return fmt.Errorf("cluster: the registry bucket did not load in %v", timeout)
	}
}

// applyWorker makes f's registration of ev.ID the bucket's.
func (n *Node) applyWorker(f *fleet.Fleet, ev WorkerEvent, log *slog.Logger) {
	cur, _, ok := f.Registered(ev.ID)
	if ev.Deleted {
		if ok {
			if err := f.Unregister(ev.ID, false); err != nil {
				log.Warn("unregister (from the registry bucket)", "worker", ev.ID, "err", err)
			}
		}
		return
	}
	w, src, err := DecodeWorker(ev.Value)
	if err != nil {
		log.Error("registry entry skipped", "worker", ev.ID, "revision", ev.Revision, "err", err)
		return
	}
	want := proto.CloneOf(w)
	want.DpSize = max(want.DpSize, 1)
	if ok && proto.Equal(cur, want) {
		return // this replica's own registration, or one it applied
	}
	if ok {
		if err := f.Unregister(ev.ID, false); err != nil {
			log.Warn("replace registration (from the registry bucket)", "worker", ev.ID, "err", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), RemoveWait)
	defer cancel()
	go func() {
		select {
		case <-n.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	err = fleet.RetryWhileRemoving(ctx, func() error { return f.Register(w, src, false) })
	if err != nil {
		log.Error("worker in the registry bucket not registered here", "worker", ev.ID, "revision", ev.Revision, "err", err)
	}
}
