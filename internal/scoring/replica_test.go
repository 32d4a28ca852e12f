package scoring

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// replicaPair is two routers over the same workers; what one reports is
// queued for the test to deliver to the other, as the cluster would.
type replicaPair struct {
	a, b  *fixture
	fromA []LoadChange
	fromB []LoadChange
}

func newReplicaPair(t *testing.T) *replicaPair {
	p := &replicaPair{}
	record := func(q *[]LoadChange) func(*Config) {
		return func(c *Config) {
			c.RequestTTL = time.Minute
			c.OnChange = func(ch LoadChange) {
				cp := ch
				cp.Predicted = slices.Clone(ch.Predicted)
				*q = append(*q, cp)
			}
		}
	}
	p.a = newFixture(t, record(&p.fromA))
	p.b = newFixture(t, record(&p.fromB))
	for _, f := range []*fixture{p.a, p.b} {
		f.addWorker("w1", "m", 1)
		f.addWorker("w2", "m", 2)
	}
	return p
}

func deliver(t *testing.T, to *fixture, origin string, q *[]LoadChange) {
	t.Helper()
	for i := range *q {
		if err := to.r.ApplyRemote(origin, &(*q)[i]); err != nil {
			t.Fatalf("apply %+v: %v", (*q)[i], err)
		}
	}
	*q = (*q)[:0]
}

// loadsOf is r's load by rank. The time policy's learned rate is left out:
// each replica learns from the marks it sees when it sees them (a mark that
// overtook its add teaches nothing), so replicas share load, not estimates.
func loadsOf(r *Router) map[kv.WorkerRank]Load {
	out := map[kv.WorkerRank]Load{}
	for _, l := range r.Loads() {
		l.PrefillTokensPerSecond = 0
		out[kv.WorkerRank{ID: l.WorkerID, DPRank: l.DPRank}] = l
	}
	return out
}

func sameLoads(t *testing.T, what string, a, b *Router) {
	t.Helper()
	la, lb := loadsOf(a), loadsOf(b)
	for k, v := range la {
		if lb[k] != v {
			t.Fatalf("%s: loads differ at %v: %+v vs %+v\nA %v\nB %v", what, k, v, lb[k], la, lb)
		}
	}
}

// TestReplicaRouteAndMarks: a Route's load and predictions reach the other
// replica; marks made on either apply on both; duplicates count once.
func TestReplicaRouteAndMarks(t *testing.T) {
	p := newReplicaPair(t)
	toks := tokens(1, 8*bs)
	d, err := p.a.r.Route(&Prompt{Model: "m", Tokens: toks}, "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.fromA) != 1 || p.fromA[0].Kind != ChangeRoute || len(p.fromA[0].Predicted) != 8 {
		t.Fatalf("A reported %+v; want one Route predicting 8 blocks", p.fromA)
	}
	dup := slices.Clone(p.fromA)
	deliver(t, p.b, "A", &p.fromA)
	deliver(t, p.b, "A", &dup) // a duplicate is dropped
	sameLoads(t, "after route", p.a.r, p.b.r)
	if p.b.r.ActiveRequests() != 1 {
		t.Fatalf("B has %d active requests; want 1", p.b.r.ActiveRequests())
	}
	res, err := p.b.r.Score(&Prompt{Model: "m", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if s := scoreOf(t, res, d.WorkerID, d.DPRank); s.Predicted != 8 {
		t.Fatalf("B's score of %s/%d: %+v; want A's 8 predicted blocks", d.WorkerID, d.DPRank, s)
	}

	// The gateway marks on B; A applies it.
	if err := p.b.r.MarkPrefillDone("r1"); err != nil {
		t.Fatal(err)
	}
	deliver(t, p.a, "B", &p.fromB)
	sameLoads(t, "after prefill done on B", p.a.r, p.b.r)
	if err := p.b.r.MarkFinished("r1"); err != nil {
		t.Fatal(err)
	}
	deliver(t, p.a, "B", &p.fromB)
	if p.a.r.ActiveRequests() != 0 || p.b.r.ActiveRequests() != 0 {
		t.Fatalf("after MarkFinished on B: A %d, B %d active; want 0", p.a.r.ActiveRequests(), p.b.r.ActiveRequests())
	}
	sameLoads(t, "after finish", p.a.r, p.b.r)
}

// TestReplicaFinishBeforeAdd: the finish reaches B before A's Route does;
// the late add is dropped, and a prefill-done that came first is applied
// on add.
func TestReplicaFinishBeforeAdd(t *testing.T) {
	p := newReplicaPair(t)
	toks := tokens(1, 4*bs)
	if _, err := p.a.r.Route(&Prompt{Model: "m", Tokens: toks}, "r1", 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := p.a.r.Route(&Prompt{Model: "m", Tokens: tokens(500, 4*bs)}, "r2", 0, 0); err != nil {
		t.Fatal(err)
	}
	// B has not seen r1 or r2: with replicas that is not NotFound.
	if err := p.b.r.MarkFinished("r1"); err != nil {
		t.Fatalf("MarkFinished of a request routed on another replica: %v", err)
	}
	if err := p.b.r.MarkPrefillDone("r2"); err != nil {
		t.Fatalf("MarkPrefillDone of a request routed on another replica: %v", err)
	}
	deliver(t, p.b, "A", &p.fromA)
	deliver(t, p.a, "B", &p.fromB)
	if p.b.r.ActiveRequests() != 1 || p.a.r.ActiveRequests() != 1 {
		t.Fatalf("A %d, B %d active; want r2 alone on both", p.a.r.ActiveRequests(), p.b.r.ActiveRequests())
	}
	sameLoads(t, "after crossed marks", p.a.r, p.b.r)
	for _, l := range loadsOf(p.b.r) {
		if l.prefillBlocks != 0 {
			t.Fatalf("B holds prefill load %+v; r2's prefill was done before its add arrived", l)
		}
	}
}

// TestReplicaResetAndDigest: a replica that missed changes resets the
// origin's requests from its state and the digests agree again.
func TestReplicaResetAndDigest(t *testing.T) {
	p := newReplicaPair(t)
	for i, id := range []string{"r1", "r2", "r3"} {
		if _, err := p.a.r.Route(&Prompt{Model: "m", Tokens: tokens(uint32(1+1000*i), 4*bs)}, id, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// B saw only r1 (and a stale r9 of A's it never heard finish).
	if err := p.b.r.ApplyRemote("A", &p.fromA[0]); err != nil {
		t.Fatal(err)
	}
	stale := p.fromA[0]
	stale.RequestID = "r9"
	if err := p.b.r.ApplyRemote("A", &stale); err != nil {
		t.Fatal(err)
	}
	if err := p.a.r.MarkFinished("r2"); err != nil {
		t.Fatal(err)
	}
	na, sa := p.a.r.LoadDigest("")
	nb, sb := p.b.r.LoadDigest("A")
	if na != 2 || (nb == na && sb == sa) {
		t.Fatalf("digests before reset: A %d/%x, B %d/%x; want A 2 and a mismatch", na, sa, nb, sb)
	}
	released, added := p.b.r.ResetRemote("A", p.a.r.LocalLoad())
	if released != 1 || added != 1 {
		t.Fatalf("reset released %d, added %d; want 1 (r9) and 1 (r3)", released, added)
	}
	nb, sb = p.b.r.LoadDigest("A")
	if nb != na || sb != sa {
		t.Fatalf("digests after reset: A %d/%x, B %d/%x; want equal", na, sa, nb, sb)
	}
	sameLoads(t, "after reset", p.a.r, p.b.r)
	// B's own requests are not A's: a reset leaves them.
	if _, err := p.b.r.Route(&Prompt{Model: "m", Tokens: tokens(9000, 4*bs)}, "b1", 0, 0); err != nil {
		t.Fatal(err)
	}
	p.b.r.ResetRemote("A", nil)
	if n, _ := p.b.r.LoadDigest(""); n != 1 || p.b.r.ActiveRequests() != 1 {
		t.Fatalf("after resetting A to nothing B holds %d own, %d total; want its own b1 alone", n, p.b.r.ActiveRequests())
	}
}

// TestReplicaUnknownWorker: a Route on a worker not registered here is
// refused, not applied to some other rank.
func TestReplicaUnknownWorker(t *testing.T) {
	p := newReplicaPair(t)
	err := p.b.r.ApplyRemote("A", &LoadChange{Kind: ChangeRoute, RequestID: "x", WorkerID: "nope"})
	if !errors.Is(err, ErrNotFound) || p.b.r.ActiveRequests() != 0 {
		t.Fatalf("route on an unknown worker: %v, %d active; want ErrNotFound and nothing added", err, p.b.r.ActiveRequests())
	}
	if err := p.b.r.ApplyRemote("A", &LoadChange{Kind: 99}); err == nil {
		t.Fatal("unknown change kind applied")
	}
}

// TestReplicaResetCarriesPrefillDone: a prefill-done B missed reaches it
// with A's state.
func TestReplicaResetCarriesPrefillDone(t *testing.T) {
	p := newReplicaPair(t)
	if _, err := p.a.r.Route(&Prompt{Model: "m", Tokens: tokens(1, 4*bs)}, "r1", 0, 0); err != nil {
		t.Fatal(err)
	}
	deliver(t, p.b, "A", &p.fromA)
	if err := p.a.r.MarkPrefillDone("r1"); err != nil {
		t.Fatal(err)
	}
	p.fromA = p.fromA[:0] // lost
	p.b.r.ResetRemote("A", p.a.r.LocalLoad())
	sameLoads(t, "after a reset that carries a missed prefill-done", p.a.r, p.b.r)
}

// TestReplicaMarkTeachesBoth: a MarkPrefillDone made on the replica that did
// not route the request teaches the time policy's learner on both: the
// routing replica learns when the mark arrives, so replicas behind a
// round-robin gateway do not each learn from half the marks.
func TestReplicaMarkTeachesBoth(t *testing.T) {
	p := newReplicaPair(t)
	for _, f := range []*fixture{p.a, p.b} {
		f.r.cfg.Policy = PolicyTime
	}
	rate := func(f *fixture, id string, dp uint32) float64 {
		for _, l := range f.r.Loads() {
			if l.WorkerID == id && l.DPRank == dp {
				return l.PrefillTokensPerSecond
			}
		}
		t.Fatalf("no load for %s/%d", id, dp)
		return 0
	}
	d, err := p.a.r.Route(&Prompt{Model: "m", Tokens: tokens(1, 64*bs)}, "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	deliver(t, p.b, "A", &p.fromA)
	priorA, priorB := rate(p.a, d.WorkerID, d.DPRank), rate(p.b, d.WorkerID, d.DPRank)
	// 1,024 tokens in 10 ms: 102,400 tokens/s, ten times the prior.
	p.a.clock.advance(10 * time.Millisecond)
	p.b.clock.advance(10 * time.Millisecond)
	if err := p.b.r.MarkPrefillDone("r1"); err != nil {
		t.Fatal(err)
	}
	deliver(t, p.a, "B", &p.fromB)
	if a, b := rate(p.a, d.WorkerID, d.DPRank), rate(p.b, d.WorkerID, d.DPRank); a <= priorA || b <= priorB {
		t.Fatalf("after a prefill of 1,024 tokens in 10 ms: rate on A %v (was %v), on B %v (was %v); want both raised", a, priorA, b, priorB)
	}
}

// TestRepeatedMarkBounded: one id marked again and again keeps one
// tombstone and a bounded expiry queue.
func TestRepeatedMarkBounded(t *testing.T) {
	tb := newLoadTable(10, time.Minute, 10000)
	now := time.Unix(1_800_000_000, 0)
	for i := range 1000 {
		tb.mark("same", i%2 == 0, now.Add(time.Duration(i)*time.Microsecond))
	}
	if len(tb.remote.tombs) != 1 || len(tb.remote.order) > 20 {
		t.Fatalf("after 1000 marks of one id: %d tombs, %d refs; want 1, at most 20", len(tb.remote.tombs), len(tb.remote.order))
	}
	if !tb.remote.tombs["same"].finished || !tb.remote.tombs["same"].prefillDone {
		t.Fatalf("the tomb lost a mark: %+v", tb.remote.tombs["same"])
	}
}

// TestReplicaRouteRetried: A routes r1 and fails before answering; the
// gateway retries the Route on B, which already holds A's change. B's Route
// replaces A's request, on B and on a third replica C; a second Route of
// r1 on B is still refused.
func TestReplicaRouteRetried(t *testing.T) {
	p := newReplicaPair(t)
	q := newReplicaPair(t) // q.a is the third replica
	toks := tokens(1, 4*bs)
	if _, err := p.a.r.Route(&Prompt{Model: "m", Tokens: toks}, "r1", 0, 0); err != nil {
		t.Fatal(err)
	}
	fromA, lateA := slices.Clone(p.fromA), slices.Clone(p.fromA)
	deliver(t, p.b, "A", &p.fromA)
	deliver(t, q.a, "A", &fromA)
	if _, err := p.b.r.Route(&Prompt{Model: "m", Tokens: toks}, "r1", 0, 0); err != nil {
		t.Fatalf("B's Route of a request A routed: %v", err)
	}
	fromB := slices.Clone(p.fromB)
	deliver(t, q.a, "B", &fromB)
	for name, r := range map[string]*Router{"B": p.b.r, "C": q.a.r} {
		if n := r.ActiveRequests(); n != 1 {
			t.Fatalf("%s holds %d requests, want r1 once", name, n)
		}
		if n, _ := r.LoadDigest("A"); n != 0 {
			t.Fatalf("%s holds %d of A's requests, want 0: B's Route replaced it", name, n)
		}
	}
	if n, _ := q.a.r.LoadDigest("B"); n != 1 {
		t.Fatalf("C holds %d of B's requests, want r1", n)
	}
	sameLoads(t, "B and C after the retry", p.b.r, q.a.r)
	// A's Route arriving late at B does not undo B's own.
	deliver(t, p.b, "A", &lateA)
	if n, _ := p.b.r.LoadDigest(""); n != 1 || p.b.r.ActiveRequests() != 1 {
		t.Fatalf("B holds %d of its own requests after A's late Route, want r1", n)
	}
	_, err := p.b.r.Route(&Prompt{Model: "m", Tokens: toks}, "r1", 0, 0)
	if !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("B's second Route of r1: %v, want ErrAlreadyExists", err)
	}
	if err := p.b.r.MarkFinished("r1"); err != nil {
		t.Fatal(err)
	}
	deliver(t, q.a, "B", &p.fromB)
	if p.b.r.ActiveRequests() != 0 || q.a.r.ActiveRequests() != 0 {
		t.Fatalf("after the finish: B %d, C %d active, want 0", p.b.r.ActiveRequests(), q.a.r.ActiveRequests())
	}
}
