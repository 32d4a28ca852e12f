package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/kvrouter/kvrouter/internal/persist"
)

// SnapshotStore is the object store as persist's Remote.
type SnapshotStore struct{ Node *Node }

var _ persist.Remote = SnapshotStore{}

// Snapshots lists the snapshot objects, newest first.
func (s SnapshotStore) Snapshots(ctx context.Context) ([]persist.Object, error) {
	objs, err := s.Node.Snapshots(ctx)
	out := make([]persist.Object, len(objs))
	for i, o := range objs {
		out[i] = persist.Object(o)
	}
	return out, err
}

// OpenSnapshot reads an object; a digest mismatch wraps persist.ErrBadObject.
func (s SnapshotStore) OpenSnapshot(ctx context.Context, name string) (io.ReadCloser, error) {
	r, err := s.Node.OpenSnapshot(ctx, name)
	if err != nil {
		return nil, err
	}
	return badObjectReader{r}, nil
}

// RefusedSnapshot counts and logs an object found bad.
func (s SnapshotStore) RefusedSnapshot(name string, err error) { s.Node.RefusedSnapshot(name, err) }

// PutSnapshot uploads what fill writes as this replica's object.
func (s SnapshotStore) PutSnapshot(ctx context.Context, fill func(io.Writer) error) (persist.Object, error) {
	o, err := s.Node.PutSnapshot(ctx, fill)
	return persist.Object(o), err
}

// Connected reports whether NATS is connected.
func (s SnapshotStore) Connected() bool { return s.Node.Connected() }

type badObjectReader struct{ io.ReadCloser }

func (r badObjectReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if errors.Is(err, ErrSnapshotCorrupt) {
		err = fmt.Errorf("%w: %w", persist.ErrBadObject, err)
	}
	return n, err
}
