package restart

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvrouter/kvrouter/bench/replay"
)

func listDir(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	if len(ents) == 0 {
		return "empty"
	}
	var parts []string
	for _, e := range ents {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			parts = append(parts, fmt.Sprintf("%s %s", e.Name(), byteSize(info.Size())))
		} else {
			parts = append(parts, e.Name()+"/")
		}
	}
	return strings.Join(parts, ", ")
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func (r *run) report(res *Result) {
	w := r.out
	ms := func(d time.Duration) string {
		if d < time.Millisecond {
			return "<1ms"
		}
		return d.Round(time.Millisecond).String()
	}
	serving := "never"
	if res.Serving {
		serving = ms(res.ToServing)
		if res.NotServing > 0 {
			serving += fmt.Sprintf(" (NOT_SERVING for %s before)", ms(res.NotServing))
		} else {
			serving += " (NOT_SERVING not seen)"
		}
	}
	exact := "not reached within " + r.cfg.Timeout.String()
	if res.Exact {
		exact = ms(res.ToExact)
	}
	fmt.Fprintf(w, "down %s; restart -> SERVING %s; restart -> exact %s\n", ms(res.Downtime), serving, exact)
	fmt.Fprintf(w, "placement: %d by Route, %d random (router down or --policy random), %d Route errors while up\n",
		r.routed.Load(), r.fallback.Load(), r.routeErr.Load())
	if res.CatchUp == nil {
		return
	}
	listed := 0
	for _, rc := range res.CatchUp.Ranks {
		if rc.Listed {
			listed++
		}
	}
	reg := "whole"
	if len(res.CatchUp.Registry) > 0 {
		reg = strings.Join(res.CatchUp.Registry, "; ")
	}
	fmt.Fprintf(w, "registry: %d of %d workers listed, %s\n", listed, r.cfg.Engines, reg)
	var outcomes []string
	for _, o := range []string{replay.RestoreRestored, replay.RestoreRebuilt, replay.RestoreReset, replay.RestoreKept, replay.RestoreCleared} {
		outcomes = append(outcomes, fmt.Sprintf("%s %d", o, res.Restore[o]))
	}
	outcomes = append(outcomes, fmt.Sprintf("none %d", res.Restore[""]))
	fmt.Fprintf(w, "restore: %s\n", strings.Join(outcomes, ", "))
	r.table(res.CatchUp, res.Expect, "after the restart")
	if res.Final != nil {
		fe := "not reached within " + r.cfg.Timeout.String()
		if res.FinalOK {
			fe = ms(res.FinalExact)
		}
		fmt.Fprintf(w, "after %v of live events: exact %s after the replay ended\n", r.cfg.After, fe)
		r.table(res.Final, res.Expect, "after the live replay")
	}
	if len(res.Failures) == 0 {
		fmt.Fprintln(w, "PASS")
		return
	}
	fmt.Fprintf(w, "FAIL (%d):\n", len(res.Failures))
	for _, f := range res.Failures {
		fmt.Fprintf(w, "  - %s\n", f)
	}
}

func (r *run) table(c *replay.ExactCheck, expect []RankExpect, title string) {
	exact := 0
	for i := range c.Ranks {
		if c.Ranks[i].Exact() {
			exact++
		}
	}
	fmt.Fprintf(r.out, "%s: %d of %d ranks exact (Score on %d cached prompts, up to %d per engine, for every rank)\n",
		title, exact, len(c.Ranks), c.Prompts, r.cfg.Samples)
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  rank\trestore\texpected\tdown/window/buffer\trouter\tengine\tscore ok\tverdict")
	for i, rc := range c.Ranks {
		restore := rc.Restore
		if restore == "" {
			restore = "-"
		}
		score := "-"
		if rc.Scored {
			score = fmt.Sprintf("%d/%d", rc.Prompts-rc.Over-rc.Under, rc.Prompts)
		}
		verdict := "exact"
		if !rc.Exact() {
			verdict = "not exact: " + rc.Reason()
		}
		x := expect[i]
		fmt.Fprintf(tw, "  %s/0\t%s\t%s\t%d/%d/%d\t%d\t%d\t%s\t%s\n", rc.Worker, restore, x, x.Down, x.Window, x.Buffer,
			rc.RouterBlocks, rc.EngineBlocks, score, verdict)
	}
	tw.Flush()
	r.out.Write(b.Bytes())
}
