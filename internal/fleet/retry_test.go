package fleet

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestRetryWhileRemoving: a registration refused while the id's old
// subscriptions stop is made again; any other refusal is final, and the
// wait ends when ctx is done.
func TestRetryWhileRemoving(t *testing.T) {
	removing := errorf(ErrRemoving, fmt.Errorf(`ingest: worker "w" is still being removed`), "worker.kv_events_endpoint: removing")
	calls := 0
	err := RetryWhileRemoving(context.Background(), func() error {
		if calls++; calls < 3 {
			return removing
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("retried register: %v after %d calls, want nil after 3", err, calls)
	}
	calls = 0
	other := errors.New("worker.endpoint: bad")
	if err := RetryWhileRemoving(context.Background(), func() error { calls++; return other }); err != other || calls != 1 {
		t.Fatalf("other refusal: %v after %d calls, want it after 1", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := RetryWhileRemoving(ctx, func() error { return removing }); err != removing {
		t.Fatalf("done ctx: %v, want the refusal", err)
	}
}
