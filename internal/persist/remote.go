package persist

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/state"
)

// Remote is the replicas' shared snapshot store (cluster.SnapshotStore).
type Remote interface {
	// Snapshots lists the objects, newest first.
	Snapshots(ctx context.Context) ([]Object, error)
	// OpenSnapshot reads an object; a read error that says its content
	// is bad wraps ErrBadObject.
	OpenSnapshot(ctx context.Context, name string) (io.ReadCloser, error)
	// RefusedSnapshot is told of an object found bad.
	RefusedSnapshot(name string, err error)
	// PutSnapshot stores what fill writes as a new object.
	PutSnapshot(ctx context.Context, fill func(io.Writer) error) (Object, error)
	// Connected reports whether the store can be reached now.
	Connected() bool
}

// Object describes a snapshot in a Remote.
type Object struct {
	Name    string
	Size    uint64
	ModTime time.Time
}

// ErrBadObject is a remote snapshot object whose content is not what was
// put (its digest differs).
var ErrBadObject = errors.New("snapshot object corrupt")

// restoreRounds is how often the remote's objects are listed before
// restoreRemote gives up.
const restoreRounds = 3

// restoreRemote loads the newest snapshot object that reads back whole.
// A bad one (digest or content) is refused by name and the next newest
// tried; when reading fails otherwise (a timeout, an object pruned while
// it was read) the objects are listed again, up to restoreRounds times. ok
// is false when there is none usable.
func (k *Keeper) restoreRemote(icfg radix.Config) (res Restored, ok bool) {
	refused := map[string]bool{}
	for round := 1; round <= restoreRounds; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), k.cfg.Timeout)
		objs, err := k.cfg.Remote.Snapshots(ctx)
		cancel()
		if err != nil {
			k.log.Error("snapshot objects not listed", "err", err)
			continue
		}
		for _, o := range objs {
			if refused[o.Name] {
				continue
			}
			res, err = k.readObject(o, icfg)
			if err == nil {
				k.log.Info("index restored from the snapshot store", "object", o.Name, "bytes", o.Size, "written", o.ModTime,
					"ranks", res.Snapshot.Counts.Ranks, "residencies", res.Snapshot.Counts.Bindings, "took", res.Took)
				return res, true
			}
			if !badSnapshot(err) {
				k.log.Warn("snapshot object not read; listing again", "object", o.Name, "round", round, "err", err)
				break
			}
			refused[o.Name] = true
			k.cfg.Remote.RefusedSnapshot(o.Name, err)
		}
	}
	return res, false
}

// readObject reads one snapshot object into an index, within a deadline
// that allows 4 MiB/s.
func (k *Keeper) readObject(o Object, icfg radix.Config) (Restored, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*k.cfg.Timeout+time.Duration(o.Size>>22)*time.Second)
	defer cancel()
	start := time.Now()
	r, err := k.cfg.Remote.OpenSnapshot(ctx, o.Name)
	if err != nil {
		return Restored{}, err
	}
	res, err := ReadSnapshot(r, icfg)
	if cerr := r.Close(); err == nil && cerr != nil {
		err = cerr
	}
	res.Took = time.Since(start)
	return res, err
}

// badSnapshot reports whether err says the snapshot's content is bad, as
// opposed to its reading failing.
func badSnapshot(err error) bool {
	return errors.Is(err, ErrBadObject) || errors.Is(err, state.ErrCorrupt) || state.IsBadFile(err)
}

// uploadTimeout bounds one upload to the remote.
const uploadTimeout = 5 * time.Minute

// upload puts the index in the remote: the local snapshot just written
// when there is a state dir, else a snapshot streamed from the index.
// Without a connection the local snapshot is still written, and the upload
// waits for the next interval.
func (k *Keeper) upload(ix *radix.Index, cp Checkpointer, now bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), uploadTimeout)
	defer cancel()
	cpu := k.cfg.CPU
	if now {
		cpu = 1
	}
	fill := func(w io.Writer) error {
		_, err := WriteSnapshot(w, ix, cp, cpu)
		return err
	}
	if k.cfg.Local != nil {
		info, err := k.local(ix, cp, now)
		if err != nil {
			return err
		}
		fill = func(w io.Writer) error { return copyFile(w, info.Path) }
	}
	if !k.cfg.Remote.Connected() {
		k.log.Warn("snapshot not uploaded: NATS is not connected")
		return nil
	}
	obj, err := k.cfg.Remote.PutSnapshot(ctx, fill)
	if err == nil {
		k.log.Debug("snapshot uploaded", "object", obj.Name, "bytes", obj.Size)
	}
	return err
}
