package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

func (e *env) rejected(reason string) float64 {
	return testutil.ToFloat64(e.srv.metrics.rejected.WithLabelValues(reason))
}

// The attack of issue 20 over gRPC: a Score of 262,144 tokens with 40,000
// multimodal items is refused InvalidArgument, naming mm_items, and counted.
// That the refusal comes before any hashing is scoring's
// TestMMItemsLimitRefusesBeforeHashing; a wall-clock bound here failed on a
// loaded machine without saying anything about the code.
func TestManyMMItemsRefused(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: "w", Model: "m"}}); err != nil {
		t.Fatal(err)
	}
	const nTokens = 262144
	p := &kvrouterv1.Prompt{Model: "m", TokenIds: make([]uint32, nTokens)}
	for i := range 40000 {
		p.MmItems = append(p.MmItems, &kvrouterv1.MultimodalItem{Hash: fmt.Sprint("i", i), Offset: uint32(i * 6), Length: 4})
	}
	_, err := e.router.Score(c, &kvrouterv1.ScoreRequest{Prompt: p})
	wantCode(t, err, codes.InvalidArgument, "prompt.mm_items has 40000 items, over --max-mm-items 1024")
	_, err = e.router.Route(c, &kvrouterv1.RouteRequest{Prompt: p, RequestId: "r"})
	wantCode(t, err, codes.InvalidArgument, "mm_items")
	if got := e.rejected(scoring.LimitMMItems); got != 2 {
		t.Fatalf("rejected{mm_items} = %v, want 2", got)
	}
	p.MmItems = p.MmItems[:1024]
	if _, err := e.router.Score(c, &kvrouterv1.ScoreRequest{Prompt: p}); err != nil {
		t.Fatalf("1024 items: %v", err)
	}
	p.TokenIds = make([]uint32, nTokens+1)
	_, err = e.router.Score(c, &kvrouterv1.ScoreRequest{Prompt: p})
	wantCode(t, err, codes.InvalidArgument, "max-prompt-tokens")
	if got := e.rejected(scoring.LimitPromptTokens); got != 1 {
		t.Fatalf("rejected{prompt_tokens} = %v, want 1", got)
	}
}

func TestRequestIDAndActiveRequestLimits(t *testing.T) {
	e := newEnv(t, func(c *scoring.Config) { c.MaxActiveRequests = 2; c.MaxRequestIDBytes = 16 })
	c := ctx(t)
	if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: "w", Model: "m"}}); err != nil {
		t.Fatal(err)
	}
	p := &kvrouterv1.Prompt{Model: "m", TokenIds: make([]uint32, 64)}
	route := func(id string) error {
		_, err := e.router.Route(c, &kvrouterv1.RouteRequest{Prompt: p, RequestId: id})
		return err
	}
	long := strings.Repeat("x", 2048)
	wantCode(t, route(long), codes.InvalidArgument, "request_id has 2048 bytes, over --max-request-id-bytes 16")
	_, err := e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: long})
	wantCode(t, err, codes.InvalidArgument, "request_id")
	_, err = e.router.MarkPrefillDone(c, &kvrouterv1.RequestRef{RequestId: long})
	wantCode(t, err, codes.InvalidArgument, "request_id")
	if got := e.rejected(scoring.LimitRequestIDBytes); got != 3 {
		t.Fatalf("rejected{request_id_bytes} = %v, want 3", got)
	}
	for _, id := range []string{"r1", "r2"} {
		if err := route(id); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, route("r3"), codes.ResourceExhausted, "--max-active-requests")
	if got := e.rejected(scoring.LimitActiveRequests); got != 1 {
		t.Fatalf("rejected{active_requests} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.srv.metrics.errors.WithLabelValues("/kvrouter.v1.Router/Route", "ResourceExhausted")); got != 1 {
		t.Fatalf("errors{Route,ResourceExhausted} = %v, want 1", got)
	}
	if err := route(""); err != nil {
		t.Fatalf("a Route without request_id: %v", err)
	}
	if _, err := e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "r1"}); err != nil {
		t.Fatal(err)
	}
	if err := route("r3"); err != nil {
		t.Fatalf("after MarkFinished: %v", err)
	}
}

func TestRegistryLimits(t *testing.T) {
	e := newEnv(t, func(c *scoring.Config) { c.MaxWorkers = 2 })
	c := ctx(t)
	reg := func(id string, dp uint32) error {
		_, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: id, Model: "m", DpSize: dp}})
		return err
	}
	if err := reg("a", 1); err != nil {
		t.Fatal(err)
	}
	wantCode(t, reg("big", kv.MaxDPSize+1), codes.InvalidArgument, "worker.dp_size 1025 is over the limit of 1024")
	if got := e.rejected(scoring.LimitDPSize); got != 1 {
		t.Fatalf("rejected{dp_size} = %v, want 1", got)
	}
	if err := reg("b", kv.MaxDPSize); err != nil {
		t.Fatal(err)
	}
	wantCode(t, reg("c", 1), codes.ResourceExhausted, "--max-workers")
	if got := e.rejected(scoring.LimitWorkers); got != 1 {
		t.Fatalf("rejected{workers} = %v, want 1", got)
	}
	if _, err := e.registry.UnregisterWorker(c, &kvrouterv1.UnregisterWorkerRequest{WorkerId: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := reg("c", 1); err != nil {
		t.Fatalf("after an unregistration: %v", err)
	}
}

// listAll follows ListWorkers' pages, checking each is within the page
// bounds, and returns the entries.
func listAll(t *testing.T, e *env, model string, pageSize uint32) ([]*kvrouterv1.WorkerStatus, int) {
	t.Helper()
	var all []*kvrouterv1.WorkerStatus
	pages := 0
	req := &kvrouterv1.ListWorkersRequest{Model: model, PageSize: pageSize}
	for {
		c, cancel := callCtx()
		resp, err := e.registry.ListWorkers(c, req)
		cancel()
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if n := len(resp.Workers); n > listPageSize || (pageSize > 0 && n > int(pageSize)) {
			t.Fatalf("page %d has %d entries (page_size %d)", pages, n, pageSize)
		}
		if sz := proto.Size(resp); sz > listPageBytes+len(resp.NextPageToken)+16 {
			t.Fatalf("page %d is %d bytes", pages, sz)
		}
		all = append(all, resp.Workers...)
		if resp.NextPageToken == "" {
			return all, pages
		}
		if len(resp.Workers) == 0 {
			t.Fatal("an empty page with a next_page_token")
		}
		req.PageToken = resp.NextPageToken
	}
}

// A 1,000-worker fleet whose full listing is over 4 MiB lists through a
// client with gRPC's default limits, a page at a time, every worker/rank
// once and in order; page_size and the model filter hold across pages.
func TestListWorkersPages(t *testing.T) {
	e := newEnv(t)
	const workers, dp = 1000, 16
	pad := strings.Repeat("p", 300)
	var full kvrouterv1.ListWorkersResponse
	for i := range workers {
		model := "even"
		if i%2 == 1 {
			model = "odd"
		}
		w := &kvrouterv1.Worker{WorkerId: fmt.Sprintf("w%04d", i), Model: model, Endpoint: "http://" + pad + fmt.Sprintf(".example:%d", 8000+i), DpSize: dp}
		c, cancel := callCtx()
		_, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for r := range uint32(dp) {
			full.Workers = append(full.Workers, &kvrouterv1.WorkerStatus{Worker: w, DpRank: r, Source: "api"})
		}
	}
	if sz := proto.Size(&full); sz <= 4<<20 {
		t.Fatalf("the fleet lists in %d bytes: not over the 4 MiB default", sz)
	}
	check := func(got []*kvrouterv1.WorkerStatus, model string) {
		t.Helper()
		i := 0
		for _, want := range full.Workers {
			if model != "" && want.Worker.Model != model {
				continue
			}
			if i >= len(got) || got[i].Worker.WorkerId != want.Worker.WorkerId || got[i].DpRank != want.DpRank {
				t.Fatalf("entry %d: %v; want %s/%d", i, got[min(i, len(got)-1)], want.Worker.WorkerId, want.DpRank)
			}
			i++
		}
		if i != len(got) {
			t.Fatalf("%d entries, want %d", len(got), i)
		}
	}
	got, pages := listAll(t, e, "", 0)
	check(got, "")
	t.Logf("%d entries (%d bytes in one message) in %d pages", len(got), proto.Size(&full), pages)
	if pages < 5 {
		t.Fatalf("%d pages", pages)
	}
	got, _ = listAll(t, e, "odd", 0)
	check(got, "odd")
	got, pages = listAll(t, e, "even", 7) // pages end inside a worker's ranks
	check(got, "even")
	if want := (workers / 2 * dp) / 7; pages < want {
		t.Fatalf("%d pages of 7, want at least %d", pages, want)
	}
	got, _ = listAll(t, e, "", 100000) // over the most: taken as listPageSize
	check(got, "")

	c := ctx(t)
	first, err := e.registry.ListWorkers(c, &kvrouterv1.ListWorkersRequest{Model: "odd", PageSize: 3})
	if err != nil || len(first.Workers) != 3 || first.NextPageToken == "" {
		t.Fatalf("first page: %v, %v", first, err)
	}
	_, err = e.registry.ListWorkers(c, &kvrouterv1.ListWorkersRequest{Model: "even", PageToken: first.NextPageToken})
	wantCode(t, err, codes.InvalidArgument, "page_token")
	_, err = e.registry.ListWorkers(c, &kvrouterv1.ListWorkersRequest{PageToken: "not a token"})
	wantCode(t, err, codes.InvalidArgument, "page_token")
	// A worker that leaves between pages does not disturb the listing.
	if _, err := e.registry.UnregisterWorker(c, &kvrouterv1.UnregisterWorkerRequest{WorkerId: "w0001"}); err != nil {
		t.Fatal(err)
	}
	next, err := e.registry.ListWorkers(c, &kvrouterv1.ListWorkersRequest{Model: "odd", PageSize: 16, PageToken: first.NextPageToken})
	if err != nil || len(next.Workers) != 16 || next.Workers[0].Worker.WorkerId != "w0003" || next.Workers[0].DpRank != 0 {
		t.Fatalf("after w0001 left: %v, %v; want w0003's 16 ranks", next, err)
	}
}

// Entries with large fields end a page before 1 MiB, whatever page_size.
func TestListWorkersPageBytes(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	big := strings.Repeat("t", 300<<10)
	for i := range 10 {
		w := &kvrouterv1.Worker{WorkerId: fmt.Sprint("w", i), Model: "m", Topic: big, DpSize: 4}
		if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
			t.Fatal(err)
		}
	}
	got, pages := listAll(t, e, "m", 0)
	if len(got) != 40 || pages != 14 { // 3 entries of 300 KiB a page
		t.Fatalf("%d entries in %d pages; want 40 in 14", len(got), pages)
	}
}
