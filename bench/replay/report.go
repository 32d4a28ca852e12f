package replay

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
)

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

func secs(d time.Duration) string {
	return fmt.Sprintf("%.2f", d.Seconds())
}

// WriteTable writes the comparison as an aligned text table.
func (r *Report) WriteTable(w io.Writer) error {
	timing := fmt.Sprintf("prefill %s/token, decode %s/token", r.PrefillPerToken, r.DecodePerToken)
	if r.EngineModel == engine.ModelVLLM.String() {
		timing = "vLLM engine model (docs/engine-model.md)"
	}
	fmt.Fprintf(w, "trace: %s (%d requests), %d engines x %d blocks of %d tokens, speed-up %gx, %s, events %s\n",
		r.Trace, r.Requests, r.Engines, r.CapacityBlocks, r.BlockSize, r.SpeedUp, timing, r.Format)
	fmt.Fprintf(w, "pooled LRU ceiling (one cache of %d blocks): %.1f%% hit rate; unlimited cache: %.1f%%\n\n",
		r.Engines*r.CapacityBlocks, 100*r.PooledCeiling, 100*r.UnlimitedIDHit)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\thit rate\tof ceiling\timbalance\tTTFT p50 s\tTTFT p99 s\troute p50 ms\troute p99 ms\tevents/s\tburst piled\terrors\t")
	for _, p := range r.Results {
		route50, route99, evs := "-", "-", "-"
		if p.Route.N > 0 {
			route50, route99 = ms(p.Route.P50), ms(p.Route.P99)
			evs = fmt.Sprintf("%.0f", p.EventsPerSec)
		}
		fmt.Fprintf(tw, "%s\t%.1f%%\t%.0f%%\t%.2f\t%s\t%s\t%s\t%s\t%s\t%.1f%%\t%d\t\n",
			p.Label(), 100*p.HitRate, 100*p.HitRateOfCeiling, p.Imbalance,
			secs(p.TTFT.P50), secs(p.TTFT.P99), route50, route99, evs, 100*p.BurstPiled, p.ChooseErrors+int(p.MarkErrors))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return r.writeReplicaTable(w)
}

// writeReplicaTable writes, for runs through the replica gateway or with a
// split point, what the gateway saw, what the routers and NATS cost, and the
// hit rate before and after the split (the kill).
func (r *Report) writeReplicaTable(w io.Writer) error {
	show := false
	for _, p := range r.Results {
		show = show || p.Gateway != nil || p.Split != nil
	}
	if !show {
		return nil
	}
	fmt.Fprintln(w)
	if r.GatewayMarks != "" {
		to := "round-robin"
		if r.RoutesToFirst {
			to = "replica 0 (--routes-to-first)"
		}
		fmt.Fprintf(w, "gateway: Routes %s, marks %s\n", to, r.GatewayMarks)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\troutes per replica\troute retries\troutes failed\tmarks not found\tmarks failed\tactive after\trouter CPU us/route\tNATS msgs/route\tNATS bytes/route\tload pub msgs/route\tload pub bytes/route\tsync lag p50/p99 ms\thit before\thit after\tkilled\t")
	for _, p := range r.Results {
		per, retries, failed, nf, mf := "-", "-", "-", "-", "-"
		if g := p.Gateway; g != nil {
			ss := make([]string, len(g.RoutesPerReplica))
			for i, n := range g.RoutesPerReplica {
				ss[i] = fmt.Sprint(n)
			}
			per = strings.Join(ss, "/")
			retries, failed = fmt.Sprint(g.RouteRetries+g.MarkRetries), fmt.Sprint(g.RoutesFailed)
			nf, mf = fmt.Sprint(g.MarksNotFound), fmt.Sprint(g.MarksFailed)
		}
		active := "-"
		if len(p.ActiveAfter) > 0 {
			ss := make([]string, len(p.ActiveAfter))
			for i, v := range p.ActiveAfter {
				ss[i] = "dead"
				if v >= 0 {
					ss[i] = fmt.Sprint(v)
				}
			}
			active = strings.Join(ss, "/")
		}
		cpu, msgs, bytes, lmsgs, lbytes := "-", "-", "-", "-", "-"
		if p.RouterCPUPerRoute > 0 {
			cpu = fmt.Sprintf("%.0f", p.RouterCPUPerRoute)
		}
		if p.NATS != nil {
			msgs, bytes = fmt.Sprintf("%.1f", p.NATSMsgsPerRoute), fmt.Sprintf("%.0f", p.NATSBytesPerRoute)
			lmsgs, lbytes = fmt.Sprintf("%.2f", p.LoadMsgsPerRoute), fmt.Sprintf("%.0f", p.LoadBytesPerRoute)
		}
		lag := "-"
		if l := p.SyncLag; l != nil && l.Lag.N > 0 {
			lag = fmt.Sprintf("%s/%s", ms(l.Lag.P50), ms(l.Lag.P99))
		}
		before, after, killed := "-", "-", "-"
		if s := p.Split; s != nil {
			before, after = fmt.Sprintf("%.1f%%", 100*s.Before), fmt.Sprintf("%.1f%%", 100*s.After)
		}
		if f := p.Failover; f != nil {
			killed = fmt.Sprintf("#%d at req %d (%d in flight)", f.Replica, f.AtRequest, f.RoutesInFlight)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			p.Label(), per, retries, failed, nf, mf, active, cpu, msgs, bytes, lmsgs, lbytes, lag, before, after, killed)
	}
	return tw.Flush()
}

// WriteJSON writes the report as indented JSON to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// SVG renders a self-contained chart: hit rate per policy (with the pooled
// ceiling as a line) and TTFT p50/p99 per policy.
func (r *Report) SVG() string {
	const (
		w, h       = 900, 420
		top, bot   = 60, 70
		panelW     = 380
		leftA      = 60
		leftB      = 500
		plotH      = h - top - bot
		colorHit   = "#3b7dd8"
		colorP50   = "#7fb77e"
		colorP99   = "#d8703b"
		colorCeil  = "#999"
		fontFamily = "font-family=\"sans-serif\""
	)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" %s font-size="16" font-weight="bold">kvbench: %d engines x %d blocks, %d requests, %gx</text>`+"\n",
		leftA, fontFamily, r.Engines, r.CapacityBlocks, r.Requests, r.SpeedUp)
	n := len(r.Results)
	if n == 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	// Panel A: hit rate.
	maxHit := r.PooledCeiling
	for _, p := range r.Results {
		maxHit = max(maxHit, p.HitRate)
	}
	maxHit = max(maxHit*1.15, 0.01)
	y := func(v, vmax float64) float64 { return float64(top) + float64(plotH)*(1-v/vmax) }
	fmt.Fprintf(&b, `<text x="%d" y="48" %s font-size="13">prefix hit rate (dashed: pooled LRU ceiling %.1f%%)</text>`+"\n", leftA, fontFamily, 100*r.PooledCeiling)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", leftA, top+plotH, leftA+panelW, top+plotH)
	slot := float64(panelW) / float64(n)
	for i, p := range r.Results {
		x := float64(leftA) + slot*float64(i) + slot*0.2
		yy := y(p.HitRate, maxHit)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, yy, slot*0.6, float64(top+plotH)-yy, colorHit)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s font-size="11" text-anchor="middle">%.1f%%</text>`+"\n", x+slot*0.3, yy-4, fontFamily, 100*p.HitRate)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s font-size="11" text-anchor="middle">%s</text>`+"\n", x+slot*0.3, top+plotH+16, fontFamily, html.EscapeString(p.Label()))
	}
	cy := y(r.PooledCeiling, maxHit)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-dasharray="6,4"/>`+"\n", leftA, cy, leftA+panelW, cy, colorCeil)
	// Panel B: TTFT p50 and p99.
	var maxT time.Duration
	for _, p := range r.Results {
		maxT = max(maxT, p.TTFT.P99)
	}
	maxTs := max(maxT.Seconds()*1.15, 0.001)
	fmt.Fprintf(&b, `<text x="%d" y="48" %s font-size="13">simulated TTFT, seconds (</text>`+"\n", leftB, fontFamily)
	fmt.Fprintf(&b, `<text x="%d" y="48" %s font-size="13" fill="%s">p50</text><text x="%d" y="48" %s font-size="13" fill="%s">p99</text><text x="%d" y="48" %s font-size="13">)</text>`+"\n",
		leftB+185, fontFamily, colorP50, leftB+215, fontFamily, colorP99, leftB+242, fontFamily)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", leftB, top+plotH, leftB+panelW, top+plotH)
	for i, p := range r.Results {
		x := float64(leftB) + slot*float64(i) + slot*0.15
		for k, v := range []time.Duration{p.TTFT.P50, p.TTFT.P99} {
			col := colorP50
			if k == 1 {
				col = colorP99
			}
			bx := x + float64(k)*slot*0.35
			yy := y(v.Seconds(), maxTs)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", bx, yy, slot*0.33, float64(top+plotH)-yy, col)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s font-size="10" text-anchor="middle">%.1f</text>`+"\n", bx+slot*0.165, yy-3, fontFamily, v.Seconds())
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s font-size="11" text-anchor="middle">%s</text>`+"\n", x+slot*0.35, top+plotH+16, fontFamily, html.EscapeString(p.Label()))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" %s font-size="11" fill="#555">prefill %s/uncached token, decode %s/token; load imbalance: `, leftA, h-20, fontFamily, r.PrefillPerToken, r.DecodePerToken)
	for i, p := range r.Results {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.2f", html.EscapeString(p.Label()), p.Imbalance)
	}
	b.WriteString("</text>\n</svg>\n")
	return b.String()
}
