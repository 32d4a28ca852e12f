package scoring

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// wantLimit checks that err is the LimitError of limit, in class, with a
// message naming text.
func wantLimit(t *testing.T, err error, limit string, class error, text string) {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != limit || !errors.Is(err, class) || !strings.Contains(err.Error(), text) {
		t.Fatalf("error %v; want the %s limit (%v) naming %q", err, limit, class, text)
	}
}

// spread returns n multimodal items of 4 tokens spread over nTokens.
func spread(n, nTokens int) []MMItem {
	items := make([]MMItem, n)
	for i := range items {
		items[i] = MMItem{Hash: fmt.Sprintf("%064x", i+1), Offset: uint32(i * (nTokens / n)), Length: 4}
	}
	return items
}

// The attack of issue 20: a prompt of 262,144 tokens with 40,000 multimodal
// items is refused before any of it is hashed, and fast; one at the limit is
// hashed.
func TestMMItemsLimitRefusesBeforeHashing(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 1)
	hashed := 0
	f.r.hashed = func() { hashed++ }
	toks := tokens(1, 262144)
	p := &Prompt{Model: "m", Tokens: toks, MM: spread(40000, len(toks))}
	start := time.Now()
	_, err := f.r.Score(p)
	took := time.Since(start)
	wantLimit(t, err, LimitMMItems, ErrInvalidArgument, "prompt.mm_items has 40000 items, over --max-mm-items 1024")
	_, err = f.r.Route(p, "r1", 0, 0)
	wantLimit(t, err, LimitMMItems, ErrInvalidArgument, "mm_items")
	if hashed != 0 {
		t.Fatalf("the prompt was hashed %d times before being refused", hashed)
	}
	if took > 250*time.Millisecond {
		t.Fatalf("refusing the prompt took %v", took)
	}
	if f.r.ActiveRequests() != 0 {
		t.Fatal("a refused Route left an active request")
	}
	p.MM = spread(DefaultConfig().MaxMMItems, len(toks))
	res, err := f.r.Score(p)
	if err != nil || res.PromptBlocks != 262144/bs || hashed != 1 {
		t.Fatalf("Score at the limit: %+v, %v (hashed %d); want 16384 blocks", res, err, hashed)
	}
}

// A prompt for a model no worker serves is answered NotFound without being
// hashed.
func TestUnknownModelIsNotHashed(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 1)
	hashed := 0
	f.r.hashed = func() { hashed++ }
	toks := tokens(1, 262144)
	p := &Prompt{Model: "other", Tokens: toks, MM: spread(1000, len(toks))}
	if _, err := f.r.Score(p); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "other") {
		t.Fatalf("Score: %v; want NotFound naming the model", err)
	}
	if _, err := f.r.Route(p, "", 0, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Route: %v; want NotFound", err)
	}
	if hashed != 0 {
		t.Fatalf("hashed %d times", hashed)
	}
}

// No Router lock is held while a prompt is hashed: a registry change (which
// takes the write lock) could go ahead meanwhile.
func TestNoRouterLockWhileHashing(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 1)
	calls := 0
	f.r.hashed = func() {
		calls++
		if !f.r.mu.TryLock() {
			t.Error("the Router's lock is held while the prompt is hashed")
			return
		}
		f.r.mu.Unlock()
	}
	p := &Prompt{Model: "m", Tokens: tokens(1, 8*bs), MM: spread(4, 8*bs)}
	if _, err := f.r.Score(p); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Route(p, "r1", 0, 0); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("hash hook called %d times, want 2", calls)
	}
}

func TestRequestIDLimit(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxRequestIDBytes = 8 })
	f.addWorker("a", "m", 1)
	p := &Prompt{Model: "m", Tokens: tokens(1, 2*bs)}
	if _, err := f.r.Route(p, "12345678", 0, 0); err != nil {
		t.Fatalf("an id at the limit: %v", err)
	}
	_, err := f.r.Route(p, "123456789", 0, 0)
	wantLimit(t, err, LimitRequestIDBytes, ErrInvalidArgument, "request_id has 9 bytes, over --max-request-id-bytes 8")
	wantLimit(t, f.r.MarkPrefillDone("123456789"), LimitRequestIDBytes, ErrInvalidArgument, "request_id")
	wantLimit(t, f.r.MarkFinished("123456789"), LimitRequestIDBytes, ErrInvalidArgument, "request_id")
	if err := f.r.MarkFinished("12345678"); err != nil {
		t.Fatal(err)
	}
	if d := DefaultConfig().MaxRequestIDBytes; d != 256 {
		t.Fatalf("default MaxRequestIDBytes %d", d)
	}
}

// Routes with a request_id past MaxActiveRequests are refused
// (ResourceExhausted) without adding load or predictions; Routes without
// one still route; a finished or expired request makes room.
func TestActiveRequestsLimit(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxActiveRequests = 3; c.RequestTTL = time.Minute })
	f.addWorker("a", "m", 1)
	p := &Prompt{Model: "m", Tokens: tokens(1, 4*bs)}
	for i := range 3 {
		if _, err := f.r.Route(p, fmt.Sprint("r", i), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	hashed := 0
	f.r.hashed = func() { hashed++ }
	_, err := f.r.Route(p, "r3", 0, 0)
	wantLimit(t, err, LimitActiveRequests, ErrResourceExhausted, "3 routed requests are active")
	if hashed != 0 {
		t.Fatal("a Route refused for want of room was hashed first")
	}
	if n := f.r.ActiveRequests(); n != 3 {
		t.Fatalf("%d active; want 3", n)
	}
	if l := f.r.Loads()[0]; l.Active != 3 {
		t.Fatalf("load %+v; want 3 active", l)
	}
	if _, err := f.r.Route(p, "", 0, 0); err != nil {
		t.Fatalf("a Route without request_id: %v", err)
	}
	if err := f.r.MarkFinished("r0"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Route(p, "r3", 0, 0); err != nil {
		t.Fatalf("after a MarkFinished: %v", err)
	}
	_, err = f.r.Route(p, "r4", 0, 0)
	wantLimit(t, err, LimitActiveRequests, ErrResourceExhausted, "--max-active-requests")
	f.clock.advance(2 * time.Minute)
	if _, err := f.r.Route(p, "r4", 0, 0); err != nil {
		t.Fatalf("after the others expired: %v", err)
	}
	if err := f.r.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestWorkerLimits(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxWorkers = 2 })
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 2)
	err := f.r.AddWorker(Worker{ID: "c", Model: "m"})
	wantLimit(t, err, LimitWorkers, ErrResourceExhausted, "--max-workers")
	f.r.RemoveWorker("a")
	f.addWorker("c", "m", 1)
	f.r.RemoveWorker("c")
	err = f.r.AddWorker(Worker{ID: "d", Model: "m", DPSize: kv.MaxDPSize + 1})
	wantLimit(t, err, LimitDPSize, ErrInvalidArgument, "worker.dp_size 1025 is over the limit of 1024")
	f.addWorker("d", "m", kv.MaxDPSize)
	if err := f.r.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if got := f.r.Limits(); got != (Limits{MaxPromptTokens: 262144, MaxMMItems: 1024, MaxRequestIDBytes: 256, MaxActiveRequests: 100_000, MaxWorkers: 2}) {
		t.Fatalf("Limits() = %+v", got)
	}
}
