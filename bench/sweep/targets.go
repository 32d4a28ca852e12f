package sweep

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/bench/stats"
)

// Target is one of the sweep's acceptance targets for one policy, judged per
// cell against the baseline.
type Target struct {
	Name string `json:"name"`
	// Cells is how many cells the target applies to, Met how many meet it.
	Cells int `json:"cells"`
	Met   int `json:"met"`
	// OutOfReach counts the misses that no routing could have met (Miss).
	OutOfReach int    `json:"out_of_reach,omitempty"`
	Misses     []Miss `json:"misses,omitempty"`
}

// Miss is one cell that misses a target, with the figure that misses and,
// for the 3x target, whether any routing could have met it.
type Miss struct {
	Cell string `json:"cell"`
	// Why is the missing figure and, for the 3x target, the arithmetic per
	// percentile that decides whether it was within reach.
	Why        string `json:"why"`
	OutOfReach bool   `json:"out_of_reach,omitempty"`
}

// The targets' thresholds.
const (
	// GainTarget is the TTFT factor over the baseline wanted at load >= 1.
	GainTarget = 3.0
	// CeilingTarget is the share of the pooled ceiling wanted at load <= 1.
	CeilingTarget = 0.9
	// ImbalanceTarget bounds max / mean per engine.
	ImbalanceTarget = 1.3
)

// Targets judges policy's results in r against the sweep's targets: TTFT p50
// and p99 never worse than the baseline; at load >= 100% both GainTarget
// times better where any routing can reach it; the hit rate at least
// CeilingTarget of the pooled ceiling at load <= 100%; prefill and prompt
// imbalance at most ImbalanceTarget. Cells without the policy or the
// baseline are left out.
func (r *Report) Targets(policy string) []Target {
	ts := []Target{
		{Name: "TTFT p50 never worse"},
		{Name: "TTFT p99 never worse"},
		{Name: fmt.Sprintf("%gx at p50 and p99, load >= 100%%", GainTarget)},
		{Name: fmt.Sprintf("hit rate >= %.0f%% of the ceiling, load <= 100%%", 100*CeilingTarget)},
		{Name: fmt.Sprintf("imbalance <= %g, prefill tokens", ImbalanceTarget)},
		{Name: fmt.Sprintf("imbalance <= %g, prompt tokens", ImbalanceTarget)},
	}
	for i := range r.Cells {
		c := &r.Cells[i]
		res, ok := c.Result(policy)
		base, okb := c.Result(r.Baseline)
		if !ok || !okb {
			continue
		}
		judge(&ts[0], c, res.TTFTP50Ratio <= 1, fmt.Sprintf("p50 %.3fx", res.TTFTP50Ratio), false)
		judge(&ts[1], c, res.TTFTP99Ratio <= 1, fmt.Sprintf("p99 %.3fx", res.TTFTP99Ratio), false)
		if c.Load >= 1 {
			why, out := c.gainMiss(res, base)
			judge(&ts[2], c, why == "", why, out)
		}
		if c.Load <= 1 {
			judge(&ts[3], c, res.HitRateOfCeiling >= CeilingTarget, fmt.Sprintf("%.1f%% of the ceiling", 100*res.HitRateOfCeiling), false)
		}
		judge(&ts[4], c, res.PrefillImbalance <= ImbalanceTarget, fmt.Sprintf("%.2f", res.PrefillImbalance), false)
		judge(&ts[5], c, res.Imbalance <= ImbalanceTarget, fmt.Sprintf("%.2f", res.Imbalance), false)
	}
	return ts
}

func judge(t *Target, c *Cell, met bool, why string, outOfReach bool) {
	t.Cells++
	if met {
		t.Met++
		return
	}
	if outOfReach {
		t.OutOfReach++
	}
	t.Misses = append(t.Misses, Miss{Cell: c.Name(), Why: why, OutOfReach: outOfReach})
}

// gainMiss says why res misses GainTarget in c, or "" if it meets it; out
// is true when a percentile it misses was out of reach for any routing: the
// target wants both.
func (c *Cell) gainMiss(res, base Result) (why string, out bool) {
	var fl stats.Summary // zero (no floor) off the vLLM model
	if c.TTFTFloor != nil {
		fl = *c.TTFTFloor
	}
	var parts []string
	for _, q := range []struct {
		name             string
		q, ratio         float64
		own, base, floor time.Duration
	}{
		{"p50", 0.5, res.TTFTP50Ratio, res.TTFT.P50, base.TTFT.P50, fl.P50},
		{"p99", 0.99, res.TTFTP99Ratio, res.TTFT.P99, base.TTFT.P99, fl.P99},
	} {
		if q.ratio*GainTarget <= 1 {
			continue
		}
		reason, unreachable := c.reach(base.HitRate, q.q, q.base, q.floor)
		if !unreachable && q.floor > 0 && res.TPOT.P50 > 0 {
			// what stands between the policy and the floor, against one
			// step of its engines' decode batch, which the floor leaves out
			reason += fmt.Sprintf("; %s's %.3f s is the floor + %.1f ms, its decode step (TPOT p50) %.1f ms",
				res.Policy, q.own.Seconds(), float64(q.own-q.floor)/1e6, float64(res.TPOT.P50)/1e6)
		}
		out = out || unreachable
		parts = append(parts, fmt.Sprintf("%s %.2fx: %s", q.name, q.ratio, reason))
	}
	if len(parts) == 0 {
		return "", false
	}
	return strings.Join(parts, "; "), out
}

// reach is the arithmetic that decides whether a TTFT percentile GainTarget
// times under the baseline's (baseQ) was within reach of any routing.
//
//   - The floor: no routing brings a request under TTFTFloor, so a target
//     under the floor's percentile is out of reach.
//   - Overload: offered load L counts every prompt token as uncached, and a
//     cache hit saves only the prefill share f of that cost. With the pooled
//     ceiling c no routing offers the fleet less than L x (1 - f c); the
//     baseline, with its hit rate h, offers L x (1 - f h). Above 1 every
//     routing's queue grows through the trace, and a fluid queue's wait at
//     each arrival grows with the excess, so no routing's wait can be more
//     than (L(1 - f h) - 1) / (L(1 - f c) - 1) times under the baseline's.
//
// Anything else is counted within reach.
func (c *Cell) reach(baseHit, q float64, baseQ, floor time.Duration) (string, bool) {
	want := time.Duration(float64(baseQ) / GainTarget)
	if floor > 0 && floor > want {
		return fmt.Sprintf("out of reach, the floor %.3f s is over %.3f s (round-robin's %.3f s / %g)",
			floor.Seconds(), want.Seconds(), baseQ.Seconds(), GainTarget), true
	}
	f := c.PrefillShare
	if f <= 0 {
		f = 1 // unknown (a report from before the share was recorded): every cost is prefill
	}
	least := c.Load * (1 - f*c.PooledCeiling)
	rr := c.Load * (1 - f*baseHit)
	if least > 1 && (rr-1) < GainTarget*(least-1) {
		return fmt.Sprintf("out of reach, overloaded for any routing (load >= %.2f with the pooled ceiling, round-robin's %.2f: a fluid queue gains at most %.1fx; its wait for round-robin at this percentile, %.1f s, against %.1f s measured)",
			least, rr, (rr-1)/(least-1), (rr-1)*q*c.TraceSeconds, baseQ.Seconds()), true
	}
	var fl string
	if floor > 0 {
		fl = fmt.Sprintf(", floor %.3f s", floor.Seconds())
	}
	return fmt.Sprintf("within reach (%gx needs %.3f s%s; load >= %.2f with the pooled ceiling)", GainTarget, want.Seconds(), fl, least), false
}

// WriteTargets writes, per non-baseline policy, how many cells meet each
// target and why each miss misses.
func (r *Report) WriteTargets(w io.Writer) error {
	var b strings.Builder
	for _, p := range r.Policies {
		if p.Name == r.Baseline {
			continue
		}
		fmt.Fprintf(&b, "\nTargets, %s against %s:\n\n| target | met | misses out of reach |\n|---|---|---|\n", p.Name, r.Baseline)
		ts := r.Targets(p.Name)
		for _, t := range ts {
			fmt.Fprintf(&b, "| %s | %d/%d | %d |\n", t.Name, t.Met, t.Cells, t.OutOfReach)
		}
		for _, t := range ts {
			if len(t.Misses) == 0 {
				continue
			}
			fmt.Fprintf(&b, "\n%s, misses:\n\n", t.Name)
			for _, m := range t.Misses {
				fmt.Fprintf(&b, "- %s: %s\n", m.Cell, m.Why)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
