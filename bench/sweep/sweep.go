// Package sweep runs kvbench's policy comparison over a matrix of traces x
// cache capacities x offered loads and reports each cell against
// round-robin.
//
// Offered load is set by scaling a trace's arrival times. A trace's offered
// load is the prefill work it brings per unit of fleet prefill capacity in
// compare's time model, counting every prompt token as uncached (round-robin's
// case, up to its few hits):
//
//	load = sum(input tokens) x prefill-per-token / (engines x duration)
//
// where duration is the trace's arrival span plus one mean gap (the span of n
// arrivals of a stationary process). To offer load L, every arrival (from the
// trace's first) is multiplied by load/L: the requests, their order, their
// prefixes and the arrival process's shape (bursts, diurnal swing) are kept,
// only the clock is stretched or compressed. Stretching does not change the
// pooled ceiling, which depends on order alone.
package sweep

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/stats"
	"github.com/kvrouter/kvrouter/bench/trace"
	"github.com/kvrouter/kvrouter/bench/tracegen"
)

// Policy is one column group of the sweep.
type Policy struct {
	// Name labels the policy in the table, JSON and chart.
	Name string
	// Run is the replay policy that carries it out (replay.PolicyKV, ...).
	Run string
	// RouterArgs are router flags added for this policy only.
	RouterArgs []string
	// Timed policies depend on wall-clock timing (the router sees marks and
	// events in wall time) and run at Config.SpeedUp. Untimed ones (their
	// choice ignores time and TTFT is simulated) run at Config.FastSpeedUp
	// with identical results.
	Timed bool
}

// Baseline is the policy every ratio is taken against.
const Baseline = replay.PolicyRoundRobin

// Policies is the default policy list, in run order (so within each cell the
// router's two costs alternate with round-robin): kvrouter as configured by
// default (the cost in time, the bounded-load guard), the earlier router
// (the cost in blocks, no guard), and round-robin.
var Policies = []Policy{
	{Name: "kvrouter", Run: replay.PolicyKV, RouterArgs: []string{"--policy=time"}, Timed: true},
	{Name: "kvrouter-blocks", Run: replay.PolicyKV, RouterArgs: []string{"--policy=blocks", "--balance-factor=0"}, Timed: true},
	{Name: Baseline, Run: replay.PolicyRoundRobin},
}

// Extra are policies --policies may name besides Policies: ablations of
// the default router.
var Extra = []Policy{
	{Name: "kvrouter-unbounded", Run: replay.PolicyKV, RouterArgs: []string{"--policy=time", "--balance-factor=0"}, Timed: true},
}

// PolicyByName returns the Policies or Extra entry called name.
func PolicyByName(name string) (Policy, bool) {
	for _, p := range append(Policies[:len(Policies):len(Policies)], Extra...) {
		if p.Name == name {
			return p, true
		}
	}
	return Policy{}, false
}

// Trace is one row group of the matrix.
type Trace struct {
	Name   string           `json:"name"`
	Source string           `json:"source"`
	Reqs   []trace.Request  `json:"-"`
	Gen    *tracegen.Config `json:"generator,omitempty"`
}

// Generate builds a synthetic trace of shape in process (tracegen's defaults,
// Poisson arrivals unless arrival says otherwise).
func Generate(shape, arrival string, seed uint64, duration, warmup time.Duration) (Trace, error) {
	c := tracegen.DefaultConfig()
	c.Shape, c.Seed, c.Duration, c.Warmup = shape, seed, duration, warmup
	if arrival != "" {
		c.Arrival.Process = arrival
	}
	gr, err := tracegen.Generate(c)
	if err != nil {
		return Trace{}, fmt.Errorf("generate %s: %w", shape, err)
	}
	reqs := make([]trace.Request, len(gr))
	for i, r := range gr {
		reqs[i] = trace.Request{
			Arrival:     time.Duration(r.Timestamp()) * time.Millisecond,
			InputLength: r.InputLength, OutputLength: r.OutputLength,
			HashIDs: r.HashIDs, BlockTokens: c.BlockTokens,
		}
	}
	src := fmt.Sprintf("kvbench gen --shape %s --arrival %s --seed %d --duration %v --warmup %v",
		shape, c.Arrival.Process, seed, duration, warmup)
	return Trace{Name: shape, Source: src, Reqs: reqs, Gen: &c}, nil
}

// OfferedLoad is reqs' prefill work per unit of the fleet's prefill capacity
// (see the package comment).
func OfferedLoad(reqs []trace.Request, engines int, prefillPerToken time.Duration) float64 {
	if len(reqs) == 0 || engines <= 0 {
		return 0
	}
	var tokens float64
	for _, r := range reqs {
		tokens += float64(r.InputLength)
	}
	d := duration(reqs)
	if d <= 0 {
		return math.Inf(1)
	}
	return tokens * prefillPerToken.Seconds() / (float64(engines) * d.Seconds())
}

func duration(reqs []trace.Request) time.Duration {
	n := len(reqs)
	span := reqs[n-1].Arrival - reqs[0].Arrival
	if n > 1 {
		span += span / time.Duration(n-1)
	}
	return span
}

// ScaleLoad returns a copy of reqs whose arrivals (from 0) are stretched so
// that OfferedLoad is target, and the factor applied.
func ScaleLoad(reqs []trace.Request, engines int, prefillPerToken time.Duration, target float64) ([]trace.Request, float64) {
	f := OfferedLoad(reqs, engines, prefillPerToken) / target
	out := make([]trace.Request, len(reqs))
	for i, r := range reqs {
		r.Arrival = time.Duration(float64(r.Arrival-reqs[0].Arrival) * f)
		out[i] = r
	}
	return out, f
}

// tokenCost is the per-prompt-token cost offered load is computed with:
// --prefill-per-token for the old model, VLLMTokenCost (at the first of
// capacities) for the vLLM model.
func (cfg Config) tokenCost(reqs []trace.Request, capacities []int) time.Duration {
	if cfg.EngineModel != engine.ModelVLLM || len(capacities) == 0 {
		return cfg.PrefillPerToken
	}
	return VLLMTokenCost(reqs, capacities[0], cfg.sched())
}

// sched is the vLLM engines' scheduler limits, as the cells run them.
func (cfg Config) sched() engine.SchedConfig {
	return engine.SchedConfig{MaxNumSeqs: cfg.MaxNumSeqs, MaxNumBatchedTokens: cfg.MaxNumBatchedTokens}
}

// Config is the matrix and how each cell runs.
type Config struct {
	Traces     []Trace
	Capacities []int
	// Loads are target offered loads (1.0 = round-robin's prefill capacity).
	Loads    []float64
	Policies []Policy
	Engines  int
	// SpeedUp is the replay speed-up for timed policies, FastSpeedUp for
	// the others.
	SpeedUp, FastSpeedUp            float64
	PrefillPerToken, DecodePerToken time.Duration
	Format                          engine.Format
	// EngineModel, MaxNumBatchedTokens and MaxNumSeqs are as in
	// replay.CompareConfig.
	EngineModel                     engine.Model
	MaxNumBatchedTokens, MaxNumSeqs int
	// Lockstep and Records are replay.CompareConfig's for every cell
	// (Records for the timed policies, whose logs have a directory).
	Lockstep, Records bool
	Router            harness.RouterConfig
	// OutDir receives router logs under logs/<cell>/; empty discards them.
	OutDir   string
	Progress io.Writer
}

// Result is one policy in one cell.
type Result struct {
	replay.PolicyResult
	// TTFTP50Ratio and TTFTP99Ratio are the policy's TTFT percentiles over
	// the baseline's in the same cell (below 1: faster).
	TTFTP50Ratio float64 `json:"ttft_p50_ratio_vs_baseline"`
	TTFTP99Ratio float64 `json:"ttft_p99_ratio_vs_baseline"`
	SpeedUp      float64 `json:"speed_up"`
}

// Cell is one trace x capacity x load.
type Cell struct {
	Trace     string  `json:"trace"`
	Capacity  int     `json:"capacity_blocks_per_engine"`
	Load      float64 `json:"offered_load"`
	TimeScale float64 `json:"arrival_time_scale"`
	// TokenCost is the per-prompt-token cost the load was computed with.
	TokenCost      string   `json:"token_cost"`
	Requests       int      `json:"requests"`
	TraceSeconds   float64  `json:"trace_seconds"`
	PooledCeiling  float64  `json:"pooled_ceiling_hit_rate"`
	Results        []Result `json:"results"`
	WallSeconds    float64  `json:"wall_seconds"`
	UnlimitedIDHit float64  `json:"unlimited_cache_hit_rate"`
	// TTFTFloor is the p50 and p99 of TTFTFloor over the cell's requests
	// (vLLM engine model only): TTFT targets below them are out of reach
	// for any router.
	TTFTFloor *stats.Summary `json:"ttft_floor,omitempty"`
	// PrefillShare is the share of TokenCost a cache hit saves (prefill;
	// the rest is the request's share of decode steps): 1 on the old model,
	// VLLMPrefillShare on the vLLM model.
	PrefillShare float64 `json:"prefill_share,omitempty"`
}

// Name is the cell's label, e.g. "chat/4096/100%".
func (c *Cell) Name() string {
	return fmt.Sprintf("%s/%d/%.0f%%", c.Trace, c.Capacity, 100*c.Load)
}

// summary is one line of c's figures per policy: hit rate of the ceiling,
// TTFT p50 / p99 over the baseline's, imbalance.
func (c *Cell) summary() string {
	var b strings.Builder
	for _, r := range c.Results {
		fmt.Fprintf(&b, " %s %s %.2fx/%.2fx %.2f/%.2f;", r.Policy, pct(r.HitRateOfCeiling), r.TTFTP50Ratio, r.TTFTP99Ratio, r.Imbalance, r.PrefillImbalance)
	}
	return b.String()
}

// Result returns the named policy's result in c.
func (c *Cell) Result(policy string) (Result, bool) {
	for _, r := range c.Results {
		if r.Policy == policy {
			return r, true
		}
	}
	return Result{}, false
}

// TraceInfo describes one trace of the sweep.
type TraceInfo struct {
	Trace
	Requests     int     `json:"requests"`
	NaturalLoad  float64 `json:"natural_offered_load"`
	PromptTokens int64   `json:"prompt_tokens"`
	TraceSeconds float64 `json:"trace_seconds"`
}

// Report is the whole sweep.
type Report struct {
	Engines         int         `json:"engines"`
	Capacities      []int       `json:"capacities"`
	Loads           []float64   `json:"offered_loads"`
	Policies        []Policy    `json:"policies"`
	Baseline        string      `json:"baseline"`
	SpeedUp         float64     `json:"speed_up"`
	FastSpeedUp     float64     `json:"fast_speed_up"`
	PrefillPerToken string      `json:"prefill_per_token"`
	DecodePerToken  string      `json:"decode_per_token"`
	EngineModel     string      `json:"engine_model"`
	Lockstep        bool        `json:"lockstep,omitempty"`
	RouterArgs      []string    `json:"router_args"`
	Traces          []TraceInfo `json:"traces"`
	Cells           []Cell      `json:"cells"`
	Started         time.Time   `json:"started"`
	WallSeconds     float64     `json:"wall_seconds"`
}

// Run runs every cell: for each trace and capacity the pooled ceiling once,
// then for each load every policy on a fresh fleet (and router).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if len(cfg.Policies) == 0 {
		cfg.Policies = Policies
	}
	if cfg.FastSpeedUp <= 0 {
		cfg.FastSpeedUp = cfg.SpeedUp
	}
	hasBase := false
	for _, p := range cfg.Policies {
		hasBase = hasBase || p.Name == Baseline
	}
	if !hasBase {
		return nil, fmt.Errorf("sweep: the policies must include %s, the baseline of every ratio", Baseline)
	}
	if cfg.Engines <= 0 || cfg.SpeedUp <= 0 || cfg.PrefillPerToken <= 0 {
		return nil, fmt.Errorf("sweep: engines (%d), speed-up (%v) and prefill per token (%v) must be positive", cfg.Engines, cfg.SpeedUp, cfg.PrefillPerToken)
	}
	rep := &Report{
		Engines: cfg.Engines, Capacities: cfg.Capacities, Loads: cfg.Loads, Policies: cfg.Policies,
		Baseline: Baseline, SpeedUp: cfg.SpeedUp, FastSpeedUp: cfg.FastSpeedUp,
		PrefillPerToken: cfg.PrefillPerToken.String(), DecodePerToken: cfg.DecodePerToken.String(),
		RouterArgs: cfg.Router.Args, Started: time.Now().UTC(), EngineModel: cfg.EngineModel.String(),
		Lockstep: cfg.Lockstep,
	}
	defer func() { rep.WallSeconds = time.Since(rep.Started).Seconds() }()
	for _, t := range cfg.Traces {
		if len(t.Reqs) == 0 {
			return rep, fmt.Errorf("sweep: trace %s is empty", t.Name)
		}
		var tok int64
		for _, r := range t.Reqs {
			tok += int64(r.InputLength)
		}
		rep.Traces = append(rep.Traces, TraceInfo{Trace: t, Requests: len(t.Reqs), PromptTokens: tok,
			NaturalLoad:  OfferedLoad(t.Reqs, cfg.Engines, cfg.tokenCost(t.Reqs, cfg.Capacities)),
			TraceSeconds: duration(t.Reqs).Seconds()})
	}
	total := len(cfg.Traces) * len(cfg.Capacities) * len(cfg.Loads)
	for _, t := range cfg.Traces {
		unlimited := trace.IDHitRate(t.Reqs)
		for _, capacity := range cfg.Capacities {
			ceiling := trace.PooledCeiling(t.Reqs, 16, cfg.Engines*capacity).HitRate()
			for _, load := range cfg.Loads {
				cost := cfg.tokenCost(t.Reqs, []int{capacity})
				reqs, f := ScaleLoad(t.Reqs, cfg.Engines, cost, load)
				cell := Cell{Trace: t.Name, Capacity: capacity, Load: load, TimeScale: f, TokenCost: cost.String(),
					Requests: len(reqs), TraceSeconds: duration(reqs).Seconds(),
					PooledCeiling: ceiling, UnlimitedIDHit: unlimited, PrefillShare: 1}
				if cfg.EngineModel == engine.ModelVLLM {
					cell.PrefillShare = VLLMPrefillShare(t.Reqs, capacity, cfg.sched())
					fl := stats.Summarize(TTFTFloor(reqs, cfg.sched()))
					cell.TTFTFloor = &fl
				}
				if cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "sweep: cell %d/%d %s: %d requests over %.0f s of trace time (arrivals x %.3g), ceiling %.1f%%\n",
						len(rep.Cells)+1, total, cell.Name(), len(reqs), cell.TraceSeconds, f, 100*ceiling)
				}
				t0 := time.Now()
				err := runCell(ctx, cfg, &cell, reqs)
				cell.WallSeconds = time.Since(t0).Seconds()
				rep.Cells = append(rep.Cells, cell)
				if cfg.Progress != nil && err == nil {
					fmt.Fprintf(cfg.Progress, "sweep: done %s:%s\n", cell.Name(), cell.summary())
				}
				if err != nil {
					return rep, fmt.Errorf("cell %s: %w", cell.Name(), err)
				}
			}
		}
	}
	return rep, nil
}

func runCell(ctx context.Context, cfg Config, cell *Cell, reqs []trace.Request) error {
	for _, p := range cfg.Policies {
		speed := cfg.FastSpeedUp
		if p.Timed {
			speed = cfg.SpeedUp
		}
		rc := cfg.Router
		rc.Args = append(append([]string(nil), cfg.Router.Args...), p.RouterArgs...)
		outDir := ""
		if cfg.OutDir != "" && p.Timed {
			outDir = filepath.Join(cfg.OutDir, "logs", strings.NewReplacer("/", "_", "%", "").Replace(cell.Name())+"_"+p.Name)
			if err := os.MkdirAll(outDir, 0o755); err != nil {
				return err
			}
		}
		cr, err := replay.Compare(ctx, replay.CompareConfig{
			Requests: reqs, Engines: cfg.Engines, Capacity: cell.Capacity, SpeedUp: speed,
			PrefillPerToken: cfg.PrefillPerToken, DecodePerToken: cfg.DecodePerToken, Format: cfg.Format,
			Router: rc, Policies: []string{p.Run}, OutDir: outDir, Progress: cfg.Progress,
			PooledCeiling: cell.PooledCeiling,
			EngineModel:   cfg.EngineModel, MaxNumBatchedTokens: cfg.MaxNumBatchedTokens, MaxNumSeqs: cfg.MaxNumSeqs,
			Lockstep: cfg.Lockstep, Records: cfg.Records,
		})
		if err != nil {
			return err
		}
		r := Result{PolicyResult: cr.Results[0], SpeedUp: speed}
		r.Policy = p.Name
		cell.Results = append(cell.Results, r)
	}
	base, _ := cell.Result(Baseline)
	for i := range cell.Results {
		r := &cell.Results[i]
		r.TTFTP50Ratio = ratio(r.TTFT.P50, base.TTFT.P50)
		r.TTFTP99Ratio = ratio(r.TTFT.P99, base.TTFT.P99)
	}
	return nil
}

// ratio is a/b; 1 when both are zero (no prefill time at all), +Inf is
// avoided by flooring b at a nanosecond.
func ratio(a, b time.Duration) float64 {
	if a == b {
		return 1
	}
	return float64(a) / float64(max(b, 1))
}

// pct formats a fraction as a percentage.
func pct(v float64) string { return strconv.FormatFloat(100*v, 'f', 0, 64) + "%" }
