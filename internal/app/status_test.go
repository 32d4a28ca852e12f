package app

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/status"
)

// TestStatusPage: every App serves /status on its HTTP listener, listing
// the registered workers and the Routes it answered, and exports each
// rank's cached blocks.
func TestStatusPage(t *testing.T) {
	cfg, log := testConfig(t)
	cfg.Workers = []WorkerConfig{{WorkerID: "file-0", Model: "m", Endpoint: "h:1", DPSize: 2}}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	cc, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	waitServing(t, cc)

	toks := make([]uint32, 64)
	for i := range toks {
		toks[i] = uint32(i)
	}
	resp, err := kvrouterv1.NewRouterClient(cc).Route(ctx, &kvrouterv1.RouteRequest{
		RequestId: "req-status-1", Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := http.Get("http://" + a.HTTPAddr() + "/status"); err != nil {
		select {
		case rerr := <-runErr:
			t.Fatalf("GET /status: %v; Run returned %v; log:\n%s", err, rerr, log)
		default:
			t.Fatalf("GET /status: %v; Run runs; log:\n%s", err, log)
		}
	} else {
		r.Body.Close()
	}
	code, page := httpGet(t, "http://"+a.HTTPAddr()+"/status")
	if code != 200 {
		t.Fatalf("/status: %d\n%s\nlog:\n%s", code, page, log)
	}
	for _, want := range []string{
		`data-worker="file-0" data-rank="0"`, `data-worker="file-0" data-rank="1"`, // both ranks listed
		"req-status-1", // the Route, with its chosen rank
		"file-0/" + string(rune('0'+resp.GetDpRank())),
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/status lacks %q:\n%s", want, page)
		}
	}
	_, metrics := httpGet(t, "http://"+a.HTTPAddr()+"/metrics")
	if !strings.Contains(metrics, `kvrouter_rank_cached_blocks{dp_rank="1",worker="file-0"} 0`) {
		t.Errorf("/metrics lacks file-0 rank 1's cached blocks:\n%s", metrics)
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// BenchmarkStatusDecision is what the status page adds to each Route: the
// hook copying a decision with the default 8 candidates into the log, from
// every core at once.
func BenchmarkStatusDecision(b *testing.B) {
	p := &statusPage{decisions: status.NewDecisionLog(status.LogConfig{})}
	d := &scoring.Decision{WorkerID: "w1", Matched: 30, PromptBlocks: 32, Cost: 4}
	for i := range 8 {
		d.Candidates = append(d.Candidates, scoring.Candidate{WorkerID: "w" + strconv.Itoa(i), Matched: uint32(30 - i), Cost: float64(4 + i)})
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.decision("m", "req-1", d)
		}
	})
}

// TestStatusDecisionReason: the page's log gets scoring's reason and round
// robin's expected match with each decision.
func TestStatusDecisionReason(t *testing.T) {
	p := &statusPage{decisions: status.NewDecisionLog(status.LogConfig{})}
	p.decision("m", "req-1", &scoring.Decision{WorkerID: "w1", Matched: 30, PromptBlocks: 32, Reason: scoring.ReasonCache, RandomMatched: 7.5})
	got := p.decisions.Recent()
	if len(got) != 1 || got[0].Reason != scoring.ReasonCache || got[0].RandomMatched != 7.5 {
		t.Fatalf("Recent() = %+v; want one decision with reason cache, random matched 7.5", got)
	}
}
