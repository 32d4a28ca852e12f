package scoring

import (
	"errors"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
)

func TestRouteLoadAccountingAndTTL(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true; c.RequestTTL = time.Minute })
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	toks := tokens(1, 10*bs)
	f.store("a", 0, toks, 6, kv.TierDevice)

	// a: cost 4; b: cost 10. r1 goes to a and adds its 4 uncached blocks as prefill.
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "r1", 0, 0)
	if err != nil || d.WorkerID != "a" {
		t.Fatalf("r1 -> %+v, %v; want a", d, err)
	}
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "r1", 0, 0); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("duplicate request_id: %v; want ErrAlreadyExists", err)
	}
	load := func(id string) Load {
		for _, l := range f.r.Loads() {
			if l.WorkerID == id {
				return l
			}
		}
		return Load{}
	}
	if l := load("a"); l.Active != 1 || l.prefillBlocks != 4 || l.prefillTokens != 4*bs || l.decodeBlocks != 0 {
		t.Fatalf("a load after route = %+v; want 1 active, 4 prefill blocks, 64 tokens", l)
	}
	if err := f.r.MarkPrefillDone("r1"); err != nil {
		t.Fatal(err)
	}
	if l := load("a"); l.prefillBlocks != 0 || l.decodeBlocks != 10 {
		t.Fatalf("a load after prefill = %+v; want decode 10", l)
	}
	// Now a costs 4 + 10 decode = 14 > b's 10: the next request goes to b.
	d, err = f.r.Route(&Prompt{Model: "m", Tokens: toks}, "r2", 0, 0)
	if err != nil || d.WorkerID != "b" {
		t.Fatalf("r2 -> %+v, %v; want b (a is loaded)", d, err)
	}
	if err := f.r.MarkFinished("r1"); err != nil {
		t.Fatal(err)
	}
	if l := load("a"); l != (Load{WorkerID: "a", PrefillTokensPerSecond: l.PrefillTokensPerSecond}) {
		t.Fatalf("a load after finish = %+v; want zero", l)
	}
	if err := f.r.MarkFinished("r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("finish twice: %v; want ErrNotFound", err)
	}
	if err := f.r.MarkPrefillDone("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown request: %v; want ErrNotFound", err)
	}
	// r2 is never finished: it expires after the TTL.
	f.clock.advance(2 * time.Minute)
	if l := load("b"); l.Active != 0 || l.prefillBlocks != 0 {
		t.Fatalf("b load after TTL = %+v; want released", l)
	}
	if err := f.r.MarkFinished("r2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired request: %v; want ErrNotFound", err)
	}
}

// Requests expire one by one as their TTLs end, oldest first, whatever was
// finished in between.
func TestRequestsExpireInOrder(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true; c.RequestTTL = time.Minute })
	f.addWorker("a", "m", 1)
	p := &Prompt{Model: "m", Tokens: tokens(1, 4*bs)}
	for _, id := range []string{"r1", "r2", "r3", "r4"} {
		if _, err := f.r.Route(p, id, 0, 0); err != nil {
			t.Fatal(err)
		}
		f.clock.advance(10 * time.Second)
	}
	if err := f.r.MarkFinished("r2"); err != nil {
		t.Fatal(err)
	}
	// Now r1 is 40s old. 25s later r1 (65s) has expired, r3 (45s) and r4 (35s) have not.
	f.clock.advance(25 * time.Second)
	if l := f.r.Loads()[0]; l.Active != 2 || l.prefillBlocks != 8 {
		t.Fatalf("load = %+v; want r3 and r4 active (2 requests, 8 blocks)", l)
	}
	for id, want := range map[string]bool{"r1": false, "r3": true, "r4": true} {
		if err := f.r.MarkPrefillDone(id); (err == nil) != want {
			t.Errorf("MarkPrefillDone(%s) = %v; active %v", id, err, want)
		}
	}
	f.clock.advance(20 * time.Second) // r3 65s, r4 55s
	if l := f.r.Loads()[0]; l.Active != 1 || l.decodeBlocks != 4 {
		t.Fatalf("load = %+v; want r4 alone in decode", l)
	}
	if err := f.r.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}
