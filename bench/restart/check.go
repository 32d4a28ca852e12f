package restart

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
)

// waitServing polls grpc.health.v1 until SERVING, noting NOT_SERVING.
func (r *run) waitServing(ctx context.Context, rt *harness.Router, res *Result) error {
	deadline := rt.Started.Add(r.cfg.Timeout)
	var firstNot time.Time
	for {
		st, err := rt.Health(ctx)
		now := time.Now()
		if err == nil && st == healthpb.HealthCheckResponse_SERVING {
			res.Serving, res.ToServing = true, now.Sub(rt.Started)
			if !firstNot.IsZero() {
				res.NotServing = now.Sub(firstNot)
			}
			r.logf("health SERVING %v after the restart", res.ToServing.Round(time.Millisecond))
			return nil
		}
		if err == nil && firstNot.IsZero() {
			firstNot = now
		}
		select {
		case <-rt.Exited():
			return fmt.Errorf("restarted router exited: %v", rt.ExitErr())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if now.After(deadline) {
			return fmt.Errorf("restarted router not SERVING within %v (last: %v %v)", r.cfg.Timeout, st, err)
		}
	}
}

func (r *run) waitSubscribed(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, e := range r.fleet.Engines {
		for !e.Publisher().Subscribed() {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: the restarted router did not subscribe within %v", e.ID(), timeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

// truth samples up to cfg.samples prompts per engine among those it served
// that it still holds at least a block of, and reads every engine's truth.
func (r *run) truth(rng *rand.Rand) *replay.Truth {
	var (
		prompts [][]uint32
		from    []int
		h       []uint64
	)
	r.mu.Lock()
	defer r.mu.Unlock()
	for ei, e := range r.fleet.Engines {
		seen := map[int]bool{}
		var cand []int
		for _, i := range r.served[ei] {
			if !seen[r.orig[i]] {
				seen[r.orig[i]] = true
				cand = append(cand, i)
			}
		}
		rng.Shuffle(len(cand), func(a, b int) { cand[a], cand[b] = cand[b], cand[a] })
		got := 0
		for tries := 0; tries < len(cand) && got < r.cfg.Samples && tries < 20*r.cfg.Samples; tries++ {
			toks := r.sched[cand[tries]].Tokens(nil)
			h = e.BlockHashes(toks, h[:0])
			if e.Overlap(h) > 0 {
				prompts, from = append(prompts, toks), append(from, ei)
				got++
			}
		}
	}
	return replay.TakeTruth(r.fleet, prompts, from)
}

// pollExact checks the router against truth until the registry is whole and
// every rank that must be exact is, then (catch-up only) a little longer for
// every rank's restore outcome, or until the timeout. It returns the first
// exact check and the time from since to it, else the last check and false.
func (r *run) pollExact(ctx context.Context, rt *harness.Router, truth *replay.Truth, must func(int, *replay.RankCheck) bool, since time.Time, catchUp bool) (*replay.ExactCheck, time.Duration, bool, error) {
	exact := func(c *replay.ExactCheck) bool {
		if len(c.Registry) > 0 {
			return false
		}
		for i := range c.Ranks {
			if must(i, &c.Ranks[i]) && !c.Ranks[i].Exact() {
				return false
			}
		}
		return true
	}
	cc := replay.CheckConfig{
		Fleet: r.fleet, Registry: rt.Registry, Router: rt.Router, Model: r.cfg.Model, Truth: truth,
		ScoreIf: func(ranks []replay.RankCheck) bool {
			for i := range ranks {
				if must(i, &ranks[i]) && !ranks[i].CountsAgree() {
					return false
				}
			}
			return true
		},
	}
	deadline := time.Now().Add(r.cfg.Timeout)
	var (
		first, last *replay.ExactCheck
		lastErr     error
	)
	for {
		c, err := replay.CheckExact(ctx, cc)
		if ctx.Err() != nil {
			return nil, 0, false, ctx.Err()
		}
		if err != nil {
			lastErr = err
		} else {
			last = c
			if first == nil && exact(c) {
				first = c
				r.logf("index exact %v after %s", c.At.Sub(since).Round(time.Millisecond), map[bool]string{true: "the restart", false: "the live replay"}[catchUp])
			}
		}
		settled := last != nil && (!catchUp || restoresSettled(last))
		switch {
		case first != nil && (settled || time.Since(first.At) > 3*time.Second):
			// Report the first exact check with the latest restore outcomes.
			for i := range first.Ranks {
				first.Ranks[i].Restore = last.Ranks[i].Restore
			}
			return first, first.At.Sub(since), true, nil
		case time.Now().After(deadline):
			if last == nil {
				return nil, 0, false, fmt.Errorf("router never answered ListWorkers after the restart: %w", lastErr)
			}
			return last, 0, false, nil
		case last != nil && time.Since(since) > r.cfg.Timeout/4 && registryEmpty(last):
			// Nobody re-registers the fleet: an empty registry stays empty.
			return last, 0, false, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func restoresSettled(c *replay.ExactCheck) bool {
	for _, rc := range c.Ranks {
		if !rc.Listed || rc.Restore == "" {
			return false
		}
	}
	return true
}

func registryEmpty(c *replay.ExactCheck) bool {
	for _, rc := range c.Ranks {
		if rc.Listed {
			return false
		}
	}
	return true
}
