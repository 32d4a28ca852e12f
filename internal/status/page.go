package status

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// PageConfig configures the page's handler.
type PageConfig struct {
	// Source lists the ranks; required.
	Source Source
	// Log supplies the decisions and the gain; nil leaves those sections
	// empty.
	Log *DecisionLog
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Refresh, when positive, has the browser reload the page that often.
	Refresh time.Duration
	// Logger receives render failures; nil discards.
	Logger *slog.Logger
}

// Sparkline plot area, in SVG user units, and the margins around it for the
// axis labels.
const (
	sparkW, sparkH   = 600, 80
	marginL, marginV = 40, 12
)

// NewHandler returns the handler of the page. It answers GET and HEAD.
func NewHandler(cfg PageConfig) http.Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &page{cfg: cfg}
}

type page struct{ cfg PageConfig }

func (p *page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, p.view()); err != nil {
		p.cfg.Logger.Error("status page: render failed", "err", err)
		http.Error(w, "status page: render failed", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	// Everything is inline: the policy lets the page load nothing else.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(buf.Bytes())
}

type view struct {
	Now                               string
	Refresh                           int
	Ranks                             []rankView
	Workers, Connected, Inexact, Sick int
	Gain                              gainView
	HasLog                            bool
	Decisions                         []decisionView
}

type rankView struct {
	Worker, Model    string
	DPRank           uint32
	Connected        bool
	LastSeq          uint64
	Lag              string
	Cached, Capacity string
	State, Class     string
	Problems         []Problem
	Restore          string
}

type gainView struct {
	W, H, SparkW, SparkH int
	HitPath, RRPath      string
	HitRate, RoundRobin  string
	Gain                 string
	Decisions            uint64
	From, To             string
	Samples              int
	Interval             string
}

type decisionView struct {
	Time, Model, RequestID string
	Worker                 string
	Reason                 string
	Matched                string
	RoundRobin             string
	Cost                   string
	Candidates             []candidateView
	Omitted                int
}

type candidateView struct {
	Worker, Matched, Prefill, Decode, Cost string
	Chosen                                 bool
}

func (p *page) view() view {
	now := p.cfg.Now()
	v := view{Now: now.UTC().Format(time.RFC3339), Refresh: int(p.cfg.Refresh / time.Second)}
	workers := map[string]bool{}
	for _, r := range p.cfg.Source.Ranks() {
		workers[r.Worker] = true
		rv := rankView{Worker: r.Worker, Model: r.Model, DPRank: r.DPRank, Connected: r.Connected,
			LastSeq: r.LastSeq, Lag: "–", Cached: strconv.FormatUint(r.CachedBlocks, 10), Capacity: "–",
			State: "ok", Class: "ok", Problems: r.Problems, Restore: r.Restore}
		if r.LagSeconds >= 0 {
			rv.Lag = formatSeconds(r.LagSeconds)
		}
		if r.CapacityBlocks > 0 {
			rv.Capacity = strconv.FormatUint(r.CapacityBlocks, 10)
		}
		if r.Connected {
			v.Connected++
		} else {
			rv.State, rv.Class = "disconnected", "bad"
		}
		if r.Inexact {
			v.Inexact++
			rv.State, rv.Class = fmt.Sprintf("inexact since seq %d", r.InexactSinceSeq), "warn"
		}
		if len(r.Problems) > 0 {
			v.Sick++
			if rv.Class == "ok" {
				rv.State, rv.Class = "refusing events", "warn"
			}
		}
		v.Ranks = append(v.Ranks, rv)
	}
	v.Workers = len(workers)
	if l := p.cfg.Log; l != nil {
		v.HasLog = true
		v.Gain = gainOf(l.Samples(now), l.cfg.Interval)
		for _, d := range l.Recent() {
			v.Decisions = append(v.Decisions, decisionViewOf(d))
		}
	}
	return v
}

// gainOf summarizes the samples: the two lines and the window's totals.
func gainOf(ss []Sample, interval time.Duration) gainView {
	g := gainView{W: sparkW + marginL, H: sparkH + marginV, SparkW: sparkW, SparkH: sparkH, Samples: len(ss), Interval: interval.String(),
		HitRate: "–", RoundRobin: "–", Gain: "–"}
	hits, rr := make([]float64, len(ss)), make([]float64, len(ss))
	var matched, prompt, known uint64
	var random float64
	for i, s := range ss {
		hits[i], rr[i] = s.HitRate, s.RoundRobin
		g.Decisions += s.Decisions
		matched, prompt = matched+s.Matched, prompt+s.Prompt
		random, known = random+s.Random, known+s.KnownPrompt
	}
	g.HitPath, g.RRPath = sparkPath(hits, sparkW, sparkH), sparkPath(rr, sparkW, sparkH)
	if len(ss) > 0 {
		g.From = ss[0].Start.UTC().Format("15:04:05")
		g.To = ss[len(ss)-1].Start.Add(interval).UTC().Format("15:04:05")
	}
	if prompt > 0 {
		g.HitRate = percent(float64(matched) / float64(prompt))
	}
	if known > 0 {
		g.RoundRobin = percent(random / float64(known))
	}
	if random > 0 && prompt > 0 {
		// The hit rates' ratio: matched / random when every decision knew
		// its estimate.
		g.Gain = strconv.FormatFloat(float64(matched)/float64(prompt)/(random/float64(known)), 'f', 2, 64) + "×"
	}
	return g
}

func decisionViewOf(d Decision) decisionView {
	dv := decisionView{
		Time: d.Time.UTC().Format("15:04:05.000"), Model: d.Model, RequestID: d.RequestID,
		Worker: fmt.Sprintf("%s/%d", d.WorkerID, d.DPRank), Reason: d.Reason,
		Matched:    fmt.Sprintf("%d / %d", d.Matched, d.PromptBlocks),
		RoundRobin: "–", Cost: formatCost(d.Cost), Omitted: d.OmittedCandidates,
	}
	if dv.Reason == "" {
		dv.Reason = "–"
	}
	if d.RandomMatched >= 0 {
		dv.RoundRobin = strconv.FormatFloat(d.RandomMatched, 'f', 1, 64)
	}
	for i, c := range d.Candidates {
		dv.Candidates = append(dv.Candidates, candidateView{
			Worker: fmt.Sprintf("%s/%d", c.WorkerID, c.DPRank), Matched: strconv.FormatUint(uint64(c.Matched), 10),
			Prefill: formatCost(c.PrefillBlocks), Decode: formatCost(c.DecodeBlocks), Cost: formatCost(c.Cost),
			Chosen: i == 0 && c.WorkerID == d.WorkerID && c.DPRank == d.DPRank,
		})
	}
	return dv
}

func percent(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

func formatCost(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }

// formatSeconds shows a lag in the unit that suits it.
func formatSeconds(s float64) string {
	switch {
	case s < 1e-3:
		return strconv.FormatFloat(s*1e6, 'f', 0, 64) + " µs"
	case s < 1:
		return strconv.FormatFloat(s*1e3, 'f', 1, 64) + " ms"
	default:
		return strconv.FormatFloat(s, 'f', 1, 64) + " s"
	}
}
