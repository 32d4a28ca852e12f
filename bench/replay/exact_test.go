package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
)

// mirrorRouter answers ListWorkers and Score from the engines themselves,
// with per-engine distortions: a block count off by extra[i], matches
// shifted by shift[i], and engine-02 listed under another endpoint.
type mirrorRouter struct {
	kvrouterv1.UnimplementedRouterServer
	kvrouterv1.UnimplementedRegistryServer
	fleet *harness.Fleet
	extra []int
	shift []int
}

func (m *mirrorRouter) ListWorkers(context.Context, *kvrouterv1.ListWorkersRequest) (*kvrouterv1.ListWorkersResponse, error) {
	resp := &kvrouterv1.ListWorkersResponse{}
	for i, e := range m.fleet.Engines {
		w := &kvrouterv1.Worker{WorkerId: e.ID(), Model: "m", KvEventsEndpoint: e.Endpoint(), ReplayEndpoint: e.ReplayEndpoint()}
		if i == 2 {
			w.KvEventsEndpoint = "tcp://127.0.0.1:1"
		}
		resp.Workers = append(resp.Workers, &kvrouterv1.WorkerStatus{
			Worker: w, CachedBlocks: uint64(e.Stats().CachedNow + m.extra[i]), Restore: []string{RestoreRestored, RestoreRebuilt, ""}[i],
		})
	}
	return resp, nil
}

func (m *mirrorRouter) Score(_ context.Context, r *kvrouterv1.ScoreRequest) (*kvrouterv1.ScoreResponse, error) {
	resp := &kvrouterv1.ScoreResponse{}
	for i, e := range m.fleet.Engines {
		n := max(e.Overlap(e.BlockHashes(r.Prompt.TokenIds, nil))+m.shift[i], 0)
		resp.Scores = append(resp.Scores, &kvrouterv1.WorkerScore{WorkerId: e.ID(), MatchedBlocks: uint32(n)})
	}
	return resp, nil
}

func TestCheckExact(t *testing.T) {
	fleet, err := harness.StartFleet(harness.FleetConfig{Engines: 3, Replay: true, Engine: engine.Config{CapacityBlocks: 200}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	var prompts [][]uint32
	var from []int
	for i, r := range smallTrace()[:9] {
		toks := r.Tokens(nil)
		fleet.Engines[i%3].Serve(engine.Request{Tokens: toks})
		prompts, from = append(prompts, toks), append(from, i%3)
	}
	truth := TakeTruth(fleet, prompts, from)
	for i, c := range truth.Cached {
		if c == 0 || truth.Matched[i][i] == 0 {
			t.Fatalf("engine %d: truth %+v", i, truth)
		}
	}

	m := &mirrorRouter{fleet: fleet, extra: []int{0, 0, -1}, shift: []int{0, 1, 0}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	kvrouterv1.RegisterRouterServer(srv, m)
	kvrouterv1.RegisterRegistryServer(srv, m)
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cfg := CheckConfig{Fleet: fleet, Registry: kvrouterv1.NewRegistryClient(cc), Router: kvrouterv1.NewRouterClient(cc), Model: "m", Truth: truth}

	c, err := CheckExact(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r0, r1, r2 := &c.Ranks[0], &c.Ranks[1], &c.Ranks[2]
	if !r0.Exact() || r0.Reason() != "" || r0.Restore != RestoreRestored || r0.Prompts != 9 {
		t.Errorf("engine-00: %+v: %s", r0, r0.Reason())
	}
	// Shifted up by one: every prompt over, the count right.
	if r1.Exact() || !r1.CountsAgree() || r1.Over != 9 || r1.Under != 0 || !r1.Overstates() || r1.Restore != RestoreRebuilt {
		t.Errorf("engine-01: %+v", r1)
	}
	if r2.Exact() || r2.CountsAgree() || r2.Overstates() || !strings.Contains(r2.Reason(), "router holds") {
		t.Errorf("engine-02: %+v: %s", r2, r2.Reason())
	}
	if len(c.Registry) != 1 || !strings.Contains(c.Registry[0], "engine-02: kv_events_endpoint") {
		t.Errorf("registry: %q", c.Registry)
	}

	// ScoreIf false skips the Score pass: nothing is exact without it.
	cfg.ScoreIf = func([]RankCheck) bool { return false }
	if c, err = CheckExact(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if c.Ranks[0].Scored || c.Ranks[0].Exact() || !strings.Contains(c.Ranks[0].Reason(), "Score not checked") {
		t.Errorf("without Score: %+v", c.Ranks[0])
	}
}
