package scoring

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestForwardDecidesOnTheDecider: a replica that forwards its Routes gets
// the decisions one router would have made, the request's load (its
// tokens counted as a token prompt's) lands on the decider and not here, a
// burst forwarded from the replica spreads as one router spreads it, the
// decider's refusal of an active request id stands, and a Route the
// decider did not answer is decided and recorded here.
func TestForwardDecidesOnTheDecider(t *testing.T) {
	fleet := func(mod func(*Config)) *fixture {
		f := newFixture(t, mod)
		for i := range 4 {
			f.addWorker(fmt.Sprintf("engine-%02d", i), "m", 1)
		}
		return f
	}
	decider, ref := fleet(nil), fleet(nil)
	answer := true
	forwarded := 0
	follower := fleet(func(c *Config) {
		c.Forward = func(fr *ForwardedRoute, dec *Decision) (bool, error) {
			if !answer {
				return false, nil
			}
			forwarded++
			err := decider.r.RouteForwarded(dec, fr)
			return err == nil || errors.Is(err, ErrAlreadyExists), err
		}
	})
	cached := &Prompt{Model: "m", Tokens: tokens(900, 8*bs+5)}
	for _, f := range []*fixture{decider, ref, follower} {
		f.store("engine-02", 0, cached.Tokens, 6, kv.TierDevice)
	}
	route := func(f *fixture, p *Prompt, id string) *Decision {
		d, err := f.r.Route(p, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	got, want := route(follower, cached, "q1"), route(ref, cached, "q1")
	if got.WorkerID != "engine-02" || got.Matched != 6 || got.Reason != want.Reason || got.Cost != want.Cost ||
		!slices.Equal(got.Candidates, want.Candidates) {
		t.Fatalf("forwarded decision %+v, one router's %+v", got, want)
	}
	if !slices.Equal(decider.r.Loads(), ref.r.Loads()) {
		t.Fatalf("decider's loads %+v, one router's %+v", decider.r.Loads(), ref.r.Loads())
	}
	if n := follower.r.ActiveRequests(); n != 0 {
		t.Fatalf("the forwarding replica holds %d requests; the decider records them", n)
	}
	for i := range 4 {
		fresh := &Prompt{Model: "m", Tokens: tokens(5000, 4*bs)}
		id := fmt.Sprintf("burst-%d", i)
		if g, w := route(follower, fresh, id).WorkerID, route(ref, fresh, id).WorkerID; g != w {
			t.Fatalf("burst request %d: forwarded to %s, one router chose %s", i, g, w)
		}
	}
	if forwarded != 5 {
		t.Fatalf("%d Routes forwarded, want 5", forwarded)
	}
	if _, err := follower.r.Route(cached, "q1", 0, 0); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("a request id active on the decider: %v, want ErrAlreadyExists", err)
	}
	answer = false
	route(follower, cached, "q2")
	if n := follower.r.ActiveRequests(); n != 1 {
		t.Fatalf("a Route the decider did not answer: %d requests here, want 1", n)
	}
}

// TestRouteForwardedRefuses: a forwarded Route is checked as a prompt is
// (it comes from the network), with a specific error, and leaves no load.
func TestRouteForwardedRefuses(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("engine-00", "m", 1)
	h := hashesOf(tokens(1, 4*bs))
	max := DefaultConfig().MaxPromptTokens
	for _, tc := range []struct {
		name string
		fr   ForwardedRoute
		want error
	}{
		{"no model", ForwardedRoute{Hashes: h, Tokens: 4 * bs}, ErrInvalidArgument},
		{"no prompt", ForwardedRoute{Model: "m"}, ErrInvalidArgument},
		{"negative temperature", ForwardedRoute{Model: "m", Hashes: h, Temperature: -1}, ErrInvalidArgument},
		{"NaN temperature", ForwardedRoute{Model: "m", Hashes: h, Temperature: math.NaN()}, ErrInvalidArgument},
		{"hashes not the tokens' blocks", ForwardedRoute{Model: "m", Hashes: h, Tokens: 9 * bs}, ErrInvalidArgument},
		{"negative tokens", ForwardedRoute{Model: "m", Hashes: h, Tokens: -1}, ErrInvalidArgument},
		{"over the token limit", ForwardedRoute{Model: "m", Hashes: h, Tokens: max + 1}, ErrInvalidArgument},
		{"over the block limit", ForwardedRoute{Model: "m", Hashes: make([]uint64, max/bs+1)}, ErrInvalidArgument},
		{"long request id", ForwardedRoute{Model: "m", Hashes: h, RequestID: string(make([]byte, 1<<20))}, ErrInvalidArgument},
		{"unserved model", ForwardedRoute{Model: "other", Hashes: h, RequestID: "q"}, ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dec Decision
			if err := f.r.RouteForwarded(&dec, &tc.fr); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if n := f.r.ActiveRequests(); n != 0 {
				t.Fatalf("a refused Route left %d requests", n)
			}
		})
	}
	var dec Decision
	if err := f.r.RouteForwarded(&dec, &ForwardedRoute{Model: "m", Hashes: h, Tokens: 4*bs + 3, RequestID: "ok"}); err != nil || dec.WorkerID != "engine-00" {
		t.Fatalf("a well-formed Route: %+v, %v", dec, err)
	}
}
