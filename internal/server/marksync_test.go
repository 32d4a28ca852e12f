package server

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// TestMarkWaitsForSync: an applied mark is answered only after
// Config.MarkSync, whose error becomes the answer's status; a refused mark
// does not wait.
func TestMarkWaitsForSync(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: "w", Model: "m"}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // the handler's goroutine and the test's
	var calls []int   // the router's active requests at each MarkSync
	var fail error
	e.srv.markSync = func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, e.srv.router.ActiveRequests())
		return fail
	}
	prompt := &kvrouterv1.Prompt{Model: "m", TokenIds: make([]uint32, 3*blockSize)}
	for _, id := range []string{"a", "b"} {
		if _, err := e.router.Route(c, &kvrouterv1.RouteRequest{Prompt: prompt, RequestId: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.router.MarkPrefillDone(c, &kvrouterv1.RequestRef{RequestId: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "a"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	fail = context.DeadlineExceeded
	mu.Unlock()
	_, err := e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "b"})
	wantCode(t, err, codes.DeadlineExceeded, "deadline")
	_, err = e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "unknown"})
	wantCode(t, err, codes.NotFound, "unknown")
	// Each wait came after its mark was applied: 2 active at the
	// prefill-done, 1 after a's finish, 0 after b's (applied, though its
	// answer is an error: a retry anywhere is harmless).
	mu.Lock()
	defer mu.Unlock()
	if want := []int{2, 1, 0}; len(calls) != len(want) || calls[0] != 2 || calls[1] != 1 || calls[2] != 0 {
		t.Fatalf("MarkSync saw %v active requests, want %v", calls, want)
	}
}
