package restart

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvrouter/kvrouter/bench/replay"
)

// verdict lists what failed: the registry, a rank whose engine still has the
// history and is not exact (or not "restored"), the short-buffer rank not
// "rebuilt", a rebuilt rank claiming blocks its engine does not hold.
func (r *run) verdict(res *Result) {
	fail := func(format string, a ...any) { res.Failures = append(res.Failures, fmt.Sprintf(format, a...)) }
	if !res.Serving {
		fail("health never SERVING after the restart")
	}
	for _, c := range []struct {
		name string
		c    *replay.ExactCheck
	}{{"after the restart", res.CatchUp}, {"after the live replay", res.Final}} {
		if c.c == nil {
			continue
		}
		if len(c.c.Registry) > 0 {
			fail("registry not whole %s: %s", c.name, strings.Join(c.c.Registry, "; "))
		}
		if c.c.ScoreErr != "" {
			fail("Score failed %s: %s", c.name, c.c.ScoreErr)
		}
	}
	if res.CatchUp == nil {
		return
	}
	for i, x := range res.Expect {
		rc := &res.CatchUp.Ranks[i]
		if !rc.Listed {
			continue // counted with the registry
		}
		want, why := x.want()
		if !slices.Contains(want, rc.Restore) {
			fail("%s: restore %q, want %s: %s", rc.Worker, rc.Restore, strings.Join(want, " or "), why)
		}
		if x.mustExact(rc.Restore) && !rc.Exact() {
			fail("%s: not exact after the restart, though %s: %s", rc.Worker, why, rc.Reason())
		}
		if rc.Restore == replay.RestoreRebuilt && rc.Overstates() {
			fail("%s: rebuilt, but claims blocks its engine does not hold: %s", rc.Worker, rc.Reason())
		}
	}
	if x := res.Expect[0]; r.cfg.ShortBuffer > 0 && x.Fresh {
		fail("scenario: engine-00 had published nothing as of the last snapshot, so its short buffer was not tested: raise --kill-min")
	} else if r.cfg.ShortBuffer > 0 && !x.Reset && !x.mustRebuild() {
		fail("scenario: engine-00 published only %d batches while the router was down, within its %d-batch buffer: raise --downtime or lower --short-buffer", res.Expect[0].Down, res.Expect[0].Buffer)
	}
	if res.Final != nil {
		for i := range res.Expect {
			if rc := &res.Final.Ranks[i]; rc.Listed && finalMustExact(res, i) && !rc.Exact() {
				fail("%s: not exact after the live replay: %s", rc.Worker, rc.Reason())
			}
		}
	}
}

// finalMustExact: after live events, every rank that had to be exact after
// the restart still must, unless the router rebuilt it (it still lacks what
// its engine's buffer lost).
func finalMustExact(res *Result, i int) bool {
	before := res.CatchUp.Ranks[i].Restore
	return before != replay.RestoreRebuilt && res.Expect[i].mustExact(before)
}
