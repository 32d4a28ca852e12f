package server

import (
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc/codes"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/kv"
)

func TestRegistrationErrorsNameTheField(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	reg := func(w *kvrouterv1.Worker) error {
		_, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w})
		return err
	}
	if err := reg(&kvrouterv1.Worker{WorkerId: "w", Model: "m"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		w    *kvrouterv1.Worker
		text string
	}{
		{"missing", nil, "worker"},
		{"duplicate", &kvrouterv1.Worker{WorkerId: "w", Model: "m"}, "worker.worker_id"},
		{"empty model", &kvrouterv1.Worker{WorkerId: "x", Model: " "}, "worker.model"},
		{"bad endpoint", &kvrouterv1.Worker{WorkerId: "x", Model: "m", Endpoint: "no-port"}, "worker.endpoint"},
		{"bad events endpoint", &kvrouterv1.Worker{WorkerId: "x", Model: "m", KvEventsEndpoint: "udp://1.2.3.4:5"}, "worker.kv_events_endpoint"},
		{"replay the router would bind", &kvrouterv1.Worker{WorkerId: "x", Model: "m",
			KvEventsEndpoint: "tcp://127.0.0.1:1", ReplayEndpoint: "@tcp://127.0.0.1:2"}, "worker.replay_endpoint"},
		{"bad replay scheme", &kvrouterv1.Worker{WorkerId: "x", Model: "m",
			KvEventsEndpoint: "tcp://127.0.0.1:1", ReplayEndpoint: "udp://127.0.0.1:2"}, "worker.replay_endpoint"},
		{"dp size", &kvrouterv1.Worker{WorkerId: "x", Model: "m", DpSize: kv.MaxDPSize + 1}, "worker.dp_size"},
	} {
		err := reg(tc.w)
		wantCode(t, err, codes.InvalidArgument, tc.text)
	}
	lw, err := e.registry.ListWorkers(c, &kvrouterv1.ListWorkersRequest{})
	if err != nil || len(lw.GetWorkers()) != 1 {
		t.Fatalf("ListWorkers after refused registrations = %v, %v; want only w", lw, err)
	}
}

// A registration whose event subscription cannot start (its bind address is
// taken: vLLM's literal tcp://*:PORT registered while an engine is bound on
// PORT) leaves no trace in the registry or the router, says what to register
// instead, and the same id can register again.
func TestRegistrationRollsBackWhenIngestFails(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	w := &kvrouterv1.Worker{WorkerId: "w", Model: "m", KvEventsEndpoint: fmt.Sprintf("tcp://*:%d", taken.Addr().(*net.TCPAddr).Port)}
	_, err = e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w})
	wantCode(t, err, codes.InvalidArgument, "worker.kv_events_endpoint")
	wantCode(t, err, codes.InvalidArgument, "register the engine's address")
	lw, err := e.registry.ListWorkers(c, &kvrouterv1.ListWorkersRequest{})
	if err != nil || len(lw.GetWorkers()) != 0 {
		t.Fatalf("ListWorkers after a failed registration = %v, %v; want none", lw, err)
	}
	_, err = e.router.Score(c, &kvrouterv1.ScoreRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: make([]uint32, 32)}})
	wantCode(t, err, codes.NotFound, `"m"`)
	w.KvEventsEndpoint = "tcp://" + taken.Addr().String() // dialled
	if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
		t.Fatalf("registering again after the rollback: %v", err)
	}
}

func TestLoadErrorsOverGRPC(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: "w", Model: "m"}}); err != nil {
		t.Fatal(err)
	}
	_, err := e.router.MarkPrefillDone(c, &kvrouterv1.RequestRef{RequestId: "nope"})
	wantCode(t, err, codes.NotFound, `"nope"`)
	_, err = e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "nope"})
	wantCode(t, err, codes.NotFound, `"nope"`)
	req := &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: make([]uint32, 32)}, RequestId: "r1"}
	if _, err := e.router.Route(c, req); err != nil {
		t.Fatal(err)
	}
	_, err = e.router.Route(c, req)
	wantCode(t, err, codes.AlreadyExists, `"r1"`)
	if _, err := e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "r1"}); err != nil {
		t.Fatal(err)
	}
	// Unregistering a worker with a routed request drops the request.
	if _, err := e.router.Route(c, req); err != nil {
		t.Fatal(err)
	}
	if _, err := e.registry.UnregisterWorker(c, &kvrouterv1.UnregisterWorkerRequest{WorkerId: "w"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "r1"})
	wantCode(t, err, codes.NotFound, `"r1"`)
	_, err = e.registry.UnregisterWorker(c, &kvrouterv1.UnregisterWorkerRequest{WorkerId: "w"})
	wantCode(t, err, codes.NotFound, `"w"`)
}

// When ingest has already forgotten a worker (its Remove forgets the worker
// even when stopping a subscription fails), UnregisterWorker still removes it
// from the registry and the router instead of failing on every retry.
func TestUnregisterAfterIngestForgot(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	_, port := listenPub(t)
	w := &kvrouterv1.Worker{WorkerId: "w", Model: "m", KvEventsEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", port)}
	if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.ingest.Remove("w"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.registry.UnregisterWorker(c, &kvrouterv1.UnregisterWorkerRequest{WorkerId: "w"}); err != nil {
		t.Fatalf("unregister: %v", err)
	}
	lw, err := e.registry.ListWorkers(c, &kvrouterv1.ListWorkersRequest{})
	if err != nil || len(lw.GetWorkers()) != 0 {
		t.Fatalf("ListWorkers = %v, %v; want none", lw, err)
	}
	if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
		t.Fatalf("registering again: %v", err)
	}
}
