package restart

import (
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/bench/replay"
)

// exactRank is a rank that matched its engine in every check.
func exactRank(worker, restore string) replay.RankCheck {
	return replay.RankCheck{Worker: worker, Listed: true, Restore: restore, RouterBlocks: 64, EngineBlocks: 64, Scored: true, Prompts: 8}
}

// TestVerdict checks which runs the verdict fails, and that each failure
// names the rank and the rule it broke.
func TestVerdict(t *testing.T) {
	restored := RankExpect{Buffer: 1000, Down: 10, Window: 50, Total: 500}
	short := RankExpect{Buffer: 16, Down: 200, Window: 250, Total: 300}
	passing := func() *Result {
		return &Result{
			Serving: true,
			Expect:  []RankExpect{short, restored},
			CatchUp: &replay.ExactCheck{Ranks: []replay.RankCheck{
				{Worker: "engine-00", Listed: true, Restore: replay.RestoreRebuilt, RouterBlocks: 40, EngineBlocks: 64, Scored: true, Under: 3},
				exactRank("engine-01", replay.RestoreRestored),
			}},
			Final: &replay.ExactCheck{Ranks: []replay.RankCheck{
				{Worker: "engine-00", Listed: true, Restore: replay.RestoreRebuilt, RouterBlocks: 50, EngineBlocks: 64, Scored: true, Under: 1},
				exactRank("engine-01", replay.RestoreRestored),
			}},
		}
	}
	for _, c := range []struct {
		name   string
		cfg    Config
		change func(*Result)
		want   []string // substrings, one per failure, in order
	}{
		{name: "a rebuilt short rank under-claiming and an exact restored rank pass", cfg: Config{ShortBuffer: 16}},
		{name: "health never serving", change: func(r *Result) { r.Serving = false }, want: []string{"health never SERVING"}},
		{
			name: "a registry that is not whole, in both checks",
			change: func(r *Result) {
				r.CatchUp.Registry = []string{"engine-02 missing"}
				r.Final.Registry = []string{"engine-02 missing"}
			},
			want: []string{"registry not whole after the restart: engine-02 missing", "registry not whole after the live replay"},
		},
		{
			name:   "a failed Score",
			change: func(r *Result) { r.CatchUp.ScoreErr = "rpc error: deadline" },
			want:   []string{"Score failed after the restart: rpc error: deadline"},
		},
		{
			name:   "a restored rank reported rebuilt",
			change: func(r *Result) { r.CatchUp.Ranks[1].Restore = replay.RestoreRebuilt },
			want:   []string{`engine-01: restore "rebuilt", want restored`},
		},
		{
			name:   "a restored rank not exact",
			change: func(r *Result) { r.CatchUp.Ranks[1].Over = 2; r.CatchUp.Ranks[1].FirstDiff = "prompt 3" },
			want:   []string{"engine-01: not exact after the restart, though its buffer of 1000 batches holds the 50 it can be missing: Score differs on 2 of 8"},
		},
		{
			name:   "a restored rank exact after the restart and not after the live replay",
			change: func(r *Result) { r.Final.Ranks[1].RouterBlocks = 60 },
			want:   []string{"engine-01: not exact after the live replay: router holds 60 blocks, engine 64"},
		},
		{
			name:   "a rebuilt rank claiming blocks its engine lacks",
			change: func(r *Result) { r.CatchUp.Ranks[0].RouterBlocks = 70 },
			want:   []string{"engine-00: rebuilt, but claims blocks its engine does not hold"},
		},
		{
			name:   "an unlisted rank is counted with the registry only",
			change: func(r *Result) { r.CatchUp.Ranks[1].Listed = false; r.Final.Ranks[1].Listed = false },
		},
		{
			name: "a short buffer that was never outrun tests nothing",
			cfg:  Config{ShortBuffer: 16},
			change: func(r *Result) {
				r.Expect[0] = RankExpect{Buffer: 16, Down: 5, Window: 250, Total: 300}
				r.CatchUp.Ranks[0] = exactRank("engine-00", replay.RestoreRebuilt)
				r.Final.Ranks[0] = exactRank("engine-00", replay.RestoreRebuilt)
			},
			want: []string{"engine-00 published only 5 batches while the router was down"},
		},
		{
			name: "a short-buffer engine silent before the snapshot tests nothing",
			cfg:  Config{ShortBuffer: 16},
			change: func(r *Result) {
				r.Expect[0].Fresh = true
			},
			want: []string{"engine-00 had published nothing as of the last snapshot"},
		},
		{
			name:   "without a catch-up check, no rank is judged",
			change: func(r *Result) { r.CatchUp = nil; r.Final.Ranks[1].Under = 4 },
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := passing()
			if c.change != nil {
				c.change(res)
			}
			(&run{cfg: c.cfg}).verdict(res)
			if len(res.Failures) != len(c.want) {
				t.Fatalf("failures %q, want %d matching %q", res.Failures, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(res.Failures[i], w) {
					t.Errorf("failure %d = %q, want it to contain %q", i, res.Failures[i], w)
				}
			}
		})
	}
}
