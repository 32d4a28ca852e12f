package fleet

import (
	"context"
	"errors"
	"time"
)

// retryPause is the wait between two tries of a registration refused with
// ErrRemoving: the stop it waits for takes up to ingest's StopTimeout.
const retryPause = 20 * time.Millisecond

// RetryWhileRemoving calls register until it is not refused with
// ErrRemoving (the id's previous subscriptions are still stopping), or
// until ctx is done; it returns register's last error. The cluster's
// reconciliation needs it: an unregistration here whose unfollow runs
// while the watch applies another replica's re-registration must not
// leave this replica without a worker every other one has.
func RetryWhileRemoving(ctx context.Context, register func() error) error {
	t := time.NewTimer(retryPause)
	defer t.Stop()
	for {
		err := register()
		if !errors.Is(err, ErrRemoving) {
			return err
		}
		t.Reset(retryPause)
		select {
		case <-ctx.Done():
			return err
		case <-t.C:
		}
	}
}
