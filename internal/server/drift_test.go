package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

func TestDriftTracker(t *testing.T) {
	now := time.Unix(1000, 0)
	var logBuf bytes.Buffer
	tr, err := newDriftTracker(DriftConfig{MaxPending: 2, Window: 10, MinChecks: 4, WarnRate: 0.5, WarnEvery: time.Minute,
		Now: func() time.Time { return now }}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logBuf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h := []uint64{1, 2, 3}
	tr.routed("m", "", "w", 0, h, true)
	tr.routed("m", "r0", "w", 0, nil, true)
	tr.routed("m", "r0", "w", 0, h, false)
	for _, r := range []string{"no_request_id", "short", "no_events"} {
		if got := testutil.ToFloat64(tr.unchecked.WithLabelValues("m", r)); got != 1 {
			t.Fatalf("unchecked{%s} = %v, want 1", r, got)
		}
	}
	tr.routed("m", "r1", "w", 0, h, true)
	tr.routed("m", "r2", "w", 0, h, true)
	tr.routed("m", "r3", "w", 0, h, true) // evicts r1, the oldest
	if got := testutil.ToFloat64(tr.unchecked.WithLabelValues("m", "not_finished")); got != 1 || tr.pendingCount() != 2 {
		t.Fatalf("not_finished = %v, pending %d; want 1 and 2", got, tr.pendingCount())
	}
	if _, ok := tr.take("r1"); ok {
		t.Fatal("r1 still pending after eviction")
	}
	c, ok := tr.take("r2")
	if !ok {
		t.Fatal("r2 not pending")
	}
	tr.verdict(c, 3)
	c, _ = tr.take("r3")
	tr.verdict(c, 2) // short: judged again after Grace
	if testutil.ToFloat64(tr.confirmed.WithLabelValues("m")) != 1 || testutil.ToFloat64(tr.mismatched.WithLabelValues("m")) != 0 {
		t.Fatal("want one confirmed (all 3 blocks held) and the short one waiting")
	}
	now = now.Add(time.Second)
	if late := tr.dueLate(); len(late) != 0 {
		t.Fatalf("%d checks due before Grace", len(late))
	}
	now = now.Add(5 * time.Second)
	late := tr.dueLate()
	if len(late) != 1 || late[0] != c {
		t.Fatalf("due after Grace: %v, want r3's check", late)
	}
	tr.verdict(c, 2)
	if testutil.ToFloat64(tr.mismatched.WithLabelValues("m")) != 1 || len(tr.dueLate()) != 0 {
		t.Fatal("want r3 mismatched (2 of 3) at its second look, and nothing left waiting")
	}
	if strings.Contains(logBuf.String(), "drift") {
		t.Fatal("warned before MinChecks")
	}
	for i := 0; i < 2; i++ {
		tr.verdict(&driftCheck{model: "m", hashes: h, due: now}, 0)
	}
	if !strings.Contains(logBuf.String(), "level=WARN") || !strings.Contains(logBuf.String(), "model=m mismatched=3 checked=4") {
		t.Fatalf("no WARN at 3 of 4 mismatched:\n%s", logBuf.String())
	}
	logBuf.Reset()
	tr.verdict(&driftCheck{model: "m", hashes: h, due: now}, 0)
	if logBuf.Len() != 0 {
		t.Fatal("warned twice within WarnEvery")
	}
	now = now.Add(time.Minute)
	tr.verdict(&driftCheck{model: "m", hashes: h, due: now}, 0)
	if !strings.Contains(logBuf.String(), "checked=6") {
		t.Fatalf("no WARN after WarnEvery:\n%s", logBuf.String())
	}
	tr.verdict(&driftCheck{model: "m", hashes: h}, -1)
	if testutil.ToFloat64(tr.unchecked.WithLabelValues("m", "no_score")) != 1 {
		t.Fatal("unknown holding not counted as no_score")
	}
}

// TestDriftOverGRPC: a text prompt routed to an engine that then stores its blocks under the
// router's hashes is confirmed at MarkFinished; one whose engine stores other tokens (another
// tokenization) is counted as mismatched.
func TestDriftOverGRPC(t *testing.T) {
	e, tk, _ := newTextEnv(t)
	c := ctx(t)
	pub, port := listenPub(t)
	w := &kvrouterv1.Worker{WorkerId: "engine-a", Model: "m", Endpoint: "a:8000", KvEventsEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", port)}
	if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
		t.Fatal(err)
	}
	drift := e.srv.text.drift
	var clock atomic.Int64 // the drift clock, in seconds; set while no RPC runs
	drift.cfg.Now = func() time.Time { return time.Unix(clock.Load(), 0) }
	ticks := 0
	tick := func() { // past Grace, and another request's MarkFinished to judge what waited
		clock.Add(int64(drift.cfg.Grace/time.Second) + 1)
		ticks++
		id := fmt.Sprint("tick-", ticks)
		if _, err := e.router.Route(c, &kvrouterv1.RouteRequest{RequestId: id, Prompt: &kvrouterv1.Prompt{Model: "m", Text: "hi"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: id}); err != nil {
			t.Fatal(err)
		}
	}
	seq := uint64(0)
	// store publishes the engine's blocks of toks until a token_ids Score sees them.
	store := func(engineHash uint64, toks []uint32) {
		n := len(toks) / blockSize
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = engineHash + uint64(i)
		}
		batch := storedBatch(t, hs, nil, toks[:n*blockSize])
		deadline := time.Now().Add(60 * time.Second)
		for ; ; seq++ {
			if err := pub.Send(zmq4.NewMsgFrom([]byte{}, seqFrame(seq), batch)); err != nil {
				t.Fatal(err)
			}
			sr, err := e.router.Score(c, &kvrouterv1.ScoreRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks}})
			if err != nil {
				t.Fatal(err)
			}
			if sr.Scores[0].MatchedBlocks == uint32(n) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the engine's blocks never arrived: %v", sr)
			}
			time.Sleep(20 * time.Millisecond) // publishing pace while the subscription connects, not synchronization
		}
	}
	route := func(id, text string) {
		if _, err := e.router.Route(c, &kvrouterv1.RouteRequest{RequestId: id, Prompt: &kvrouterv1.Prompt{Model: "m", Text: text}}); err != nil {
			t.Fatal(err)
		}
	}
	route("agree", longText)
	toks, _ := tk.Encode(longText, true)
	store(0xa000, toks)
	if _, err := e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "agree"}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(drift.confirmed.WithLabelValues("m")); got != 1 {
		t.Fatalf("confirmed = %v, want 1", got)
	}
	other := "A different prompt, long enough for three blocks of sixteen tokens each, about routing and caches and engines that tokenize."
	route("drift", other)
	mine, _ := tk.Encode(other, true)
	theirs := append([]uint32{151643}, mine...) // the engine adds a BOS the router did not
	store(0xb000, theirs)
	if _, err := e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "drift"}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(drift.mismatched.WithLabelValues("m")); got != 0 {
		t.Fatalf("mismatched = %v before Grace, want 0", got)
	}
	tick()
	if len(mine)/blockSize == 0 || testutil.ToFloat64(drift.mismatched.WithLabelValues("m")) != 1 {
		t.Fatalf("mismatched = %v, want 1", testutil.ToFloat64(drift.mismatched.WithLabelValues("m")))
	}
	// The engine's events arrive after MarkFinished: confirmed at the second look, not mismatched.
	third := "A third prompt whose engine publishes its blocks only after the gateway marks it finished, as under load."
	route("late", third)
	if _, err := e.router.MarkFinished(c, &kvrouterv1.RequestRef{RequestId: "late"}); err != nil {
		t.Fatal(err)
	}
	toks3, _ := tk.Encode(third, true)
	store(0xc000, toks3)
	tick()
	if got, bad := testutil.ToFloat64(drift.confirmed.WithLabelValues("m")), testutil.ToFloat64(drift.mismatched.WithLabelValues("m")); got != 2 || bad != 1 {
		t.Fatalf("confirmed = %v, mismatched = %v; want the late one confirmed (2, 1)", got, bad)
	}
}
