package persist

import (
	"context"
	"time"

	"github.com/kvrouter/kvrouter/internal/radix"
)

// Run writes a snapshot every interval until ctx is done. A failed
// snapshot is logged and counted (see Snapshot); the next tick tries again.
func (s *Store) Run(ctx context.Context, interval time.Duration, ix *radix.Index, cp Checkpointer) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Snapshot(ix, cp); err != nil {
				s.log.Error("snapshot failed; the previous one stays", "err", err)
			}
		}
	}
}
