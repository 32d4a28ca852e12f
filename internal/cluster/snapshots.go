package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Index snapshots live in the object store <prefix>-snapshots, in the
// snapshot file format of internal/state, as objects named
// snapshot-<replica id>-<unix nanoseconds>. An object is never
// overwritten, so a replica reading one is not cut short by its writer's
// next snapshot; after a put the store keeps the newest
// Config.SnapshotsKept objects (of all replicas). The store checks each
// object's SHA-256 digest as it is read; the reader of the content checks
// the format's own checksums.

const snapshotObjectPrefix = "snapshot-"

// SnapshotObject describes a snapshot in the object store.
type SnapshotObject struct {
	Name    string
	Size    uint64
	ModTime time.Time
}

// PutSnapshot uploads the snapshot fill writes as this replica's object,
// then removes the oldest objects past Config.SnapshotsKept. A failed fill
// or upload leaves the previous object.
func (n *Node) PutSnapshot(ctx context.Context, fill func(io.Writer) error) (SnapshotObject, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(fill(pw)) }()
	name := fmt.Sprintf("%s%s-%d", snapshotObjectPrefix, n.cfg.ReplicaID, time.Now().UnixNano())
	info, err := n.obs.Put(ctx, jetstream.ObjectMeta{Name: name, Description: "kvrouter index snapshot"}, pr)
	pr.CloseWithError(err) // stops fill if the upload failed first
	if err != nil {
		n.metrics.snapshots.WithLabelValues("error").Inc()
		return SnapshotObject{}, fmt.Errorf("cluster: put snapshot %s: %w", name, err)
	}
	n.metrics.snapshots.WithLabelValues("ok").Inc()
	if err := n.pruneSnapshots(ctx); err != nil {
		n.log.Warn("old snapshot objects not removed", "err", err)
	}
	return SnapshotObject{Name: info.Name, Size: info.Size, ModTime: info.ModTime}, nil
}

// Snapshots lists the snapshot objects, newest first.
func (n *Node) Snapshots(ctx context.Context) ([]SnapshotObject, error) {
	infos, err := n.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: list snapshots: %w", err)
	}
	var out []SnapshotObject
	for _, in := range infos {
		if in.Deleted || !strings.HasPrefix(in.Name, snapshotObjectPrefix) {
			continue
		}
		out = append(out, SnapshotObject{Name: in.Name, Size: in.Size, ModTime: in.ModTime})
	}
	slices.SortFunc(out, func(a, b SnapshotObject) int { return b.ModTime.Compare(a.ModTime) })
	return out, nil
}

// ErrSnapshotCorrupt is a snapshot object whose content is not what was
// put (its SHA-256 digest does not match).
var ErrSnapshotCorrupt = errors.New("snapshot object corrupt")

// OpenSnapshot reads a snapshot object. The reader's last Read fails with
// ErrSnapshotCorrupt when the content is not what was put; other errors
// (a timeout, the object replaced while it was read) are worth a retry.
func (n *Node) OpenSnapshot(ctx context.Context, name string) (io.ReadCloser, error) {
	r, err := n.obs.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("cluster: get snapshot %s: %w", name, err)
	}
	return digestReader{r}, nil
}

type digestReader struct{ jetstream.ObjectResult }

func (d digestReader) Read(p []byte) (int, error) {
	n, err := d.ObjectResult.Read(p)
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		err = fmt.Errorf("%w: %w", ErrSnapshotCorrupt, err)
	}
	return n, err
}

// RefusedSnapshot counts a snapshot object found bad by its reader.
func (n *Node) RefusedSnapshot(name string, err error) {
	n.metrics.refused.Inc()
	n.log.Error("snapshot object refused", "object", name, "bucket", n.snapshotBucket(), "reason", err)
}

func (n *Node) pruneSnapshots(ctx context.Context) error {
	objs, err := n.Snapshots(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range objs[min(len(objs), n.cfg.SnapshotsKept):] {
		if err := n.obs.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
