package persist

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/state"
)

// KeeperConfig configures a Keeper.
type KeeperConfig struct {
	// Local is the state directory; nil: none.
	Local *Store
	// Remote is the replicas' snapshot store; nil: a single router.
	Remote Remote
	// Timeout bounds one listing of Remote, and with the object's size
	// one read of it. Required with Remote.
	Timeout time.Duration
	// CPU is the share of one core a periodic snapshot streamed to Remote
	// may take (see Config.SnapshotCPU); 0 means DefaultSnapshotCPU.
	CPU float64
	// Logger; nil discards.
	Logger *slog.Logger
}

// Keeper keeps the index's snapshots where the router has them: the state
// directory, the replicas' snapshot store, both, or neither. It restores
// from them at start, writes one every interval, and one at shutdown.
type Keeper struct {
	cfg KeeperConfig
	log *slog.Logger
}

// NewKeeper returns a Keeper for cfg.
func NewKeeper(cfg KeeperConfig) (*Keeper, error) {
	if cfg.Remote != nil && cfg.Timeout <= 0 {
		return nil, errors.New("persist: KeeperConfig.Timeout must be positive with a Remote")
	}
	if cfg.CPU == 0 {
		cfg.CPU = DefaultSnapshotCPU
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Keeper{cfg: cfg, log: log}, nil
}

// Restore loads the newest usable snapshot into a new index of icfg: the
// state directory's, else (no local snapshot) the remote's newest. With
// none, Index is nil. Only an I/O error on the state directory is returned.
func (k *Keeper) Restore(icfg radix.Config) (Restored, error) {
	if k.cfg.Local != nil {
		res, err := k.cfg.Local.Restore(icfg)
		if err != nil || res.Snapshot.Path != "" {
			return res, err
		}
		if k.cfg.Remote == nil {
			return res, nil
		}
	}
	if k.cfg.Remote != nil {
		if res, ok := k.restoreRemote(icfg); ok {
			return res, nil
		}
	}
	return Restored{}, nil
}

// Run writes a snapshot every interval until ctx is done: to the state
// directory, and uploaded to the remote. A failed snapshot is logged and
// counted; the next tick tries again.
func (k *Keeper) Run(ctx context.Context, interval time.Duration, ix *radix.Index, cp Checkpointer) {
	if k.cfg.Local == nil && k.cfg.Remote == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := k.snapshot(ix, cp, false); err != nil {
				k.log.Error("snapshot failed; the previous one stays", "err", err)
			}
		}
	}
}

// Final writes the shutdown snapshot flat out; call it while the
// subscriptions still run (a rank is cut between two of its batches).
func (k *Keeper) Final(ix *radix.Index, cp Checkpointer) {
	if k.cfg.Local == nil && k.cfg.Remote == nil {
		return
	}
	if err := k.snapshot(ix, cp, true); err != nil {
		k.log.Error("shutdown snapshot failed; the previous one stays", "err", err)
		return
	}
	if k.cfg.Remote != nil {
		k.log.Info("shutdown snapshot uploaded")
	}
}

func (k *Keeper) snapshot(ix *radix.Index, cp Checkpointer, now bool) error {
	if k.cfg.Remote != nil {
		return k.upload(ix, cp, now)
	}
	_, err := k.local(ix, cp, now)
	return err
}

// local writes a snapshot to the state directory, paced unless now.
func (k *Keeper) local(ix *radix.Index, cp Checkpointer, now bool) (state.SnapshotInfo, error) {
	if now {
		info, err := k.cfg.Local.SnapshotNow(ix, cp)
		if err == nil {
			k.log.Info("shutdown snapshot written", "file", info.Path, "residencies", info.Counts.Bindings)
		}
		return info, err
	}
	return k.cfg.Local.Snapshot(ix, cp)
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
