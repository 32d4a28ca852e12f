package sweep

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"os"
	"strings"

	"github.com/kvrouter/kvrouter/bench/engine"
)

// WriteMarkdown writes the sweep as one markdown table: a row per cell; per
// policy its hit rate of the pooled ceiling, its TTFT p50 and p99 over the
// baseline's (x, lower is better) and its load imbalance (max / mean per
// engine of prompt tokens, and of uncached prompt blocks); the baseline's own
// TTFT in seconds for scale. On the vLLM engine model each cell also gives
// the TTFT floor (TTFTFloor) no router can beat. The targets follow the table
// (WriteTargets).
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	if r.EngineModel == engine.ModelVLLM.String() {
		pace := "speed-up"
		if r.Lockstep {
			pace = "lockstep, paced at"
		}
		fmt.Fprintf(&b, "%d engines; vLLM engine model; %s %gx (untimed policies %gx); load = prompt tokens x cost per token (prefill and decode share, sweep.VLLMTokenCost) / (engines x trace duration)\n\n",
			r.Engines, pace, r.SpeedUp, r.FastSpeedUp)
	} else {
		fmt.Fprintf(&b, "%d engines; prefill %s/uncached token, decode %s/token; speed-up %gx (untimed policies %gx); load = prompt tokens x prefill time / (engines x trace duration)\n\n",
			r.Engines, r.PrefillPerToken, r.DecodePerToken, r.SpeedUp, r.FastSpeedUp)
	}
	b.WriteString("| trace | blocks | load | ceiling |")
	sep := "|---|---|---|---|"
	floor := r.EngineModel == engine.ModelVLLM.String()
	if floor {
		b.WriteString(" TTFT floor p50 / p99 s |")
		sep += "---|"
	}
	for _, p := range r.Policies {
		if p.Name == r.Baseline {
			fmt.Fprintf(&b, " %s of ceiling | %s TTFT p50 / p99 s | %s imbalance prompt / prefill |", p.Name, p.Name, p.Name)
		} else {
			fmt.Fprintf(&b, " %s of ceiling | %s TTFT p50 / p99 vs %s | %s imbalance prompt / prefill |", p.Name, p.Name, r.Baseline, p.Name)
		}
		sep += "---|---|---|"
	}
	b.WriteString("\n" + sep + "\n")
	for i := range r.Cells {
		c := &r.Cells[i]
		fmt.Fprintf(&b, "| %s | %d | %s | %.1f%% |", c.Trace, c.Capacity, pct(c.Load), 100*c.PooledCeiling)
		switch {
		case floor && c.TTFTFloor != nil:
			fmt.Fprintf(&b, " %.3f / %.3f |", c.TTFTFloor.P50.Seconds(), c.TTFTFloor.P99.Seconds())
		case floor:
			b.WriteString(" - |")
		}
		for _, p := range r.Policies {
			res, ok := c.Result(p.Name)
			if !ok {
				b.WriteString(" - | - | - |")
				continue
			}
			if p.Name == r.Baseline {
				fmt.Fprintf(&b, " %s | %.1f / %.1f | %.2f / %.2f |", pct(res.HitRateOfCeiling), res.TTFT.P50.Seconds(), res.TTFT.P99.Seconds(), res.Imbalance, res.PrefillImbalance)
			} else {
				fmt.Fprintf(&b, " %s | %.2fx / %.2fx | %.2f / %.2f |", pct(res.HitRateOfCeiling), res.TTFTP50Ratio, res.TTFTP99Ratio, res.Imbalance, res.PrefillImbalance)
			}
		}
		b.WriteString("\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	return r.WriteTargets(w)
}

// ReadJSON reads a report WriteJSON wrote.
func ReadJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("sweep report %s: %w", path, err)
	}
	if len(r.Cells) == 0 || r.Baseline == "" {
		return nil, fmt.Errorf("sweep report %s: %w", path, ErrNotReport)
	}
	return &r, nil
}

// ErrNotReport is a JSON file without a sweep's cells or baseline.
var ErrNotReport = errors.New("no cells or no baseline: not a kvbench sweep report")

// WriteJSON writes the report as indented JSON to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

var palette = []string{"#3b7dd8", "#999999", "#d8703b", "#7fb77e", "#a05fc0", "#c0a030"}

// SVG renders two panels over the cells: the hit rate of the pooled ceiling
// per policy (dashed: 90% and 100%), and each non-baseline policy's TTFT p50
// (light) and p99 (dark) over the baseline's (dashed: 1, the baseline).
// It runs past 100 lines: one SVG document written top to bottom,
// panel by panel.
func (r *Report) SVG() string {
	const (
		left, right = 70, 20
		top         = 50
		panelH      = 220
		gap         = 130
		font        = `font-family="sans-serif"`
	)
	nc := len(r.Cells)
	var others []Policy
	for _, p := range r.Policies {
		if p.Name != r.Baseline {
			others = append(others, p)
		}
	}
	slot := 14.0 * float64(max(len(r.Policies), 2*len(others))+1)
	w := left + right + int(slot*float64(max(nc, 1)))
	w = max(w, 640)
	h := top + 2*panelH + gap + 110
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", w, h, w, h)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" %s font-size="15" font-weight="bold">kvbench sweep: %d engines, %d cells (trace/blocks per engine/offered load)</text>`+"\n", left, font, r.Engines, nc)
	// Legend.
	lx := left
	for i, p := range r.Policies {
		fmt.Fprintf(&b, `<rect x="%d" y="30" width="10" height="10" fill="%s"/><text x="%d" y="39" %s font-size="11">%s</text>`+"\n",
			lx, palette[i%len(palette)], lx+14, font, html.EscapeString(p.Name))
		lx += 24 + 7*len(p.Name)
	}
	fmt.Fprintf(&b, `<text x="%d" y="39" %s font-size="11" fill="#555">TTFT bars: light p50, dark p99</text>`+"\n", lx+10, font)

	// Panel A: hit rate of the ceiling.
	maxA := 1.1
	for i := range r.Cells {
		for _, res := range r.Cells[i].Results {
			maxA = max(maxA, res.HitRateOfCeiling*1.05)
		}
	}
	yA := func(v float64) float64 { return top + 20 + panelH*(1-v/maxA) }
	baseA := yA(0)
	fmt.Fprintf(&b, `<text x="%d" y="%d" %s font-size="13">hit rate, of the pooled LRU ceiling</text>`+"\n", left, top+12, font)
	axis(&b, left, w-right, yA, maxA, []float64{0, 0.5, 0.9, 1}, true)
	for ci := range r.Cells {
		c := &r.Cells[ci]
		x0 := float64(left) + slot*float64(ci) + 7
		for pi, p := range r.Policies {
			res, ok := c.Result(p.Name)
			if !ok {
				continue
			}
			y := yA(res.HitRateOfCeiling)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="12" height="%.1f" fill="%s"><title>%s %s: %.0f%% of ceiling</title></rect>`+"\n",
				x0+14*float64(pi), y, baseA-y, palette[pi%len(palette)], html.EscapeString(c.Name()), html.EscapeString(p.Name), 100*res.HitRateOfCeiling)
		}
	}

	// Panel B: TTFT ratios.
	topB := float64(top + panelH + gap)
	maxB := 1.2
	for i := range r.Cells {
		for _, res := range r.Cells[i].Results {
			maxB = max(maxB, res.TTFTP50Ratio*1.05, res.TTFTP99Ratio*1.05)
		}
	}
	yB := func(v float64) float64 { return topB + 20 + panelH*(1-v/maxB) }
	baseB := yB(0)
	fmt.Fprintf(&b, `<text x="%d" y="%.0f" %s font-size="13">TTFT over %s's (p50, p99; below 1 is faster)</text>`+"\n", left, topB+12, font, html.EscapeString(r.Baseline))
	axis(&b, left, w-right, yB, maxB, []float64{0, 1.0 / 3, 1}, false)
	for ci := range r.Cells {
		c := &r.Cells[ci]
		x0 := float64(left) + slot*float64(ci) + 7
		k := 0
		for pi, p := range r.Policies {
			if p.Name == r.Baseline {
				continue
			}
			res, ok := c.Result(p.Name)
			if !ok {
				k += 2
				continue
			}
			for j, v := range []float64{res.TTFTP50Ratio, res.TTFTP99Ratio} {
				op := "0.5"
				if j == 1 {
					op = "1"
				}
				y := yB(v)
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="12" height="%.1f" fill="%s" fill-opacity="%s"><title>%s %s: TTFT p%s %.2fx</title></rect>`+"\n",
					x0+14*float64(k), y, baseB-y, palette[pi%len(palette)], op, html.EscapeString(c.Name()), html.EscapeString(p.Name), []string{"50", "99"}[j], v)
				k++
			}
		}
		// Cell label under panel B, rotated.
		lx := x0 + slot/2 - 7
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s font-size="10" text-anchor="end" transform="rotate(-60 %.1f %.1f)">%s</text>`+"\n",
			lx, baseB+12, font, lx, baseB+12, html.EscapeString(c.Name()))
		// And under panel A.
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s font-size="10" text-anchor="end" transform="rotate(-60 %.1f %.1f)">%s</text>`+"\n",
			lx, baseA+12, font, lx, baseA+12, html.EscapeString(c.Name()))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" %s font-size="11" fill="#555">prefill %s/uncached token, decode %s/token; offered load = prompt tokens x prefill time / (engines x duration)</text>`+"\n",
		left, h-12, font, html.EscapeString(r.PrefillPerToken), html.EscapeString(r.DecodePerToken))
	b.WriteString("</svg>\n")
	return b.String()
}

// axis draws a baseline, dashed guides at marks and their labels.
func axis(b *strings.Builder, x0, x1 int, y func(float64) float64, vmax float64, marks []float64, percent bool) {
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>`+"\n", x0, y(0), x1, y(0))
	for _, m := range marks {
		if m <= 0 || m > vmax {
			continue
		}
		label := fmt.Sprintf("%.2g", m)
		if percent {
			label = pct(m)
		}
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#bbb" stroke-dasharray="5,4"/>`+"\n", x0, y(m), x1, y(m))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" font-family="sans-serif" font-size="10" text-anchor="end">%s</text>`+"\n", x0-4, y(m)+3, label)
	}
}
