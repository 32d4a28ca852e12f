package server

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// memStore is a RegistryStore in memory that can be made to fail.
type memStore struct {
	workers map[string]Source
	fail    error
}

func (m *memStore) Put(w *kvrouterv1.Worker, src Source) error {
	if m.fail != nil {
		return m.fail
	}
	m.workers[w.WorkerId] = src
	return nil
}

func (m *memStore) Delete(id string) error {
	if m.fail != nil {
		return m.fail
	}
	delete(m.workers, id)
	return nil
}

// TestStartLater: a server made without a router answers every kvrouter.v1
// call Unavailable until Start, then serves; registrations reach the store
// before they are acknowledged, and one the store refuses is not made.
func TestStartLater(t *testing.T) {
	store := &memStore{workers: map[string]Source{}}
	srv, err := New(Config{Store: store, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	cc := serveLoopback(t, srv)
	reg, rt := kvrouterv1.NewRegistryClient(cc), kvrouterv1.NewRouterClient(cc)
	c := ctx(t)
	w := &kvrouterv1.Worker{WorkerId: "w", Model: "m"}
	_, err = reg.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w})
	wantCode(t, err, codes.Unavailable, "restoring")
	_, err = rt.Score(c, &kvrouterv1.ScoreRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: []uint32{1}}})
	wantCode(t, err, codes.Unavailable, "restoring")

	idx := radix.New(radix.Config{})
	ing, err := ingest.New(ingest.Config{Index: idx, BlockSize: blockSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ing.Close() })
	router, err := scoring.New(scoring.Config{Index: idx, BlockSize: blockSize})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(router, ing, idx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(router, ing, idx); err == nil {
		t.Fatal("second Start accepted")
	}
	if _, err := reg.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
		t.Fatal(err)
	}
	if store.workers["w"] != SourceAPI {
		t.Fatalf("store holds %v after RegisterWorker", store.workers)
	}
	store.fail = errors.New("disk full")
	_, err = reg.UnregisterWorker(c, &kvrouterv1.UnregisterWorkerRequest{WorkerId: "w"})
	wantCode(t, err, codes.Unavailable, "disk full")
	_, err = reg.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: "x", Model: "m"}})
	wantCode(t, err, codes.Unavailable, "disk full")
	lw, err := reg.ListWorkers(c, &kvrouterv1.ListWorkersRequest{})
	if err != nil || len(lw.GetWorkers()) != 1 || lw.GetWorkers()[0].GetSource() != "api" {
		t.Fatalf("after refused store writes: %v, %v; want w (api) alone", lw, err)
	}
	if _, err := rt.Score(c, &kvrouterv1.ScoreRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: []uint32{1}}}); err != nil {
		t.Fatalf("Score after Start: %v", err)
	}
}
