package replay

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/stats"
	"github.com/kvrouter/kvrouter/bench/trace"
)

// Policy names.
const (
	PolicyKV          = "kvrouter"
	PolicyKVNoPredict = "kvrouter-nopredict"
	PolicyRoundRobin  = "round-robin"
	PolicyRandom      = "random"
)

// AllPolicies is the default comparison, in run order.
var AllPolicies = []string{PolicyKV, PolicyKVNoPredict, PolicyRoundRobin, PolicyRandom}

// RouterChooser asks the router's Route for every request (with request_id,
// so the router tracks its load) and maps the chosen worker to the fleet.
func RouterChooser(rc kvrouterv1.RouterClient, f *Fleet, model string) ChooseFunc {
	return func(ctx context.Context, seq int, tokens []uint32, id string) (Choice, error) {
		req := &kvrouterv1.RouteRequest{
			Prompt:        &kvrouterv1.Prompt{Model: model, TokenIds: tokens},
			RequestId:     id,
			MaxCandidates: 1,
		}
		t0 := time.Now()
		resp, err := rc.Route(ctx, req)
		lat := time.Since(t0)
		if err != nil {
			return Choice{}, fmt.Errorf("route: %w", err)
		}
		i, ok := f.Index(resp.WorkerId)
		if !ok {
			return Choice{}, fmt.Errorf("route chose unknown worker %q", resp.WorkerId)
		}
		return Choice{Engine: i, Routed: true, RouteLatency: lat, Matched: resp.MatchedBlocks, PromptBlocks: resp.PromptBlocks}, nil
	}
}

// RoundRobin cycles through n engines in arrival order.
func RoundRobin(n int) ChooseFunc {
	return func(_ context.Context, seq int, _ []uint32, _ string) (Choice, error) {
		return Choice{Engine: seq % n}, nil
	}
}

// Random picks an engine uniformly, as a seeded function of the request's
// position, so a run is reproducible however choices interleave.
func Random(n int, seed uint64) ChooseFunc {
	return func(_ context.Context, seq int, _ []uint32, _ string) (Choice, error) {
		r := rand.New(rand.NewPCG(seed, uint64(seq)))
		return Choice{Engine: r.IntN(n)}, nil
	}
}

// DefaultPredictionTTL is the router's default life of a predicted block.
const DefaultPredictionTTL = 2 * time.Minute

// ScaleRouterArgs adds --prediction-ttl scaled down by the speed-up, unless
// args already set it: the TTL stands for engine time (how long until an
// engine's own events confirm or its cache has moved on), and the replay
// runs engine time speedUp times faster than the router's wall clock.
func ScaleRouterArgs(args []string, speedUp float64) []string {
	for _, a := range args {
		if strings.HasPrefix(strings.TrimLeft(a, "-"), "prediction-ttl") {
			return args
		}
	}
	if speedUp <= 1 {
		return args
	}
	ttl := time.Duration(float64(DefaultPredictionTTL) / speedUp).Round(time.Millisecond)
	return append(args, "--prediction-ttl="+ttl.String())
}

// CompareConfig configures a policy comparison.
type CompareConfig struct {
	Requests []trace.Request
	// Engines, Capacity (blocks per engine), BlockSize and the time model.
	Engines         int
	Capacity        int
	BlockSize       int
	PrefillPerToken time.Duration
	DecodePerToken  time.Duration
	Format          engine.Format
	// SpeedUp divides trace time into wall time.
	SpeedUp float64
	// Model is the model name engines register under.
	Model string
	// Router is the subprocess template (binary, extra flags).
	Router RouterConfig
	// Policies to run, in order (default AllPolicies).
	Policies []string
	// OutDir receives router logs; empty discards them.
	OutDir string
	// Progress receives a progress line every few seconds; nil for none.
	Progress io.Writer
	// Seed seeds the random policy.
	Seed uint64
	// PooledCeiling, when positive, is the pooled ceiling's hit rate for
	// Requests at Engines x Capacity, computed by the caller (a sweep shares
	// it between runs); zero computes it.
	PooledCeiling float64
}

// PolicyResult is one policy's figures.
type PolicyResult struct {
	Policy       string  `json:"policy"`
	Requests     int     `json:"requests"`
	PromptBlocks uint64  `json:"prompt_blocks"`
	CachedBlocks uint64  `json:"cached_blocks"`
	HitRate      float64 `json:"hit_rate"`
	// HitRateOfCeiling is HitRate / the pooled ceiling.
	HitRateOfCeiling float64 `json:"hit_rate_of_ceiling"`
	Imbalance        float64 `json:"load_imbalance"`
	// PrefillImbalance is max / mean uncached prompt blocks per engine: the
	// balance of prefill work, where Imbalance counts cached tokens too.
	PrefillImbalance float64       `json:"prefill_imbalance"`
	PromptTokens     []uint64      `json:"prompt_tokens_per_engine"`
	TTFT             stats.Summary `json:"ttft"`
	Route            stats.Summary `json:"route_latency"`
	// RouterHitRate is matched / prompt blocks as Route answered (the router's view).
	RouterHitRate   float64 `json:"router_hit_rate"`
	EventsPublished uint64  `json:"events_published"`
	EventsApplied   uint64  `json:"events_applied"`
	EventsPerSec    float64 `json:"events_applied_per_sec"`
	ChooseErrors    int     `json:"choose_errors"`
	MarkErrors      int64   `json:"mark_errors"`
	FirstError      string  `json:"first_error,omitempty"`
	MaxLag          string  `json:"max_dispatch_lag"`
	WallSeconds     float64 `json:"wall_seconds"`
}

// Report is the whole comparison.
type Report struct {
	Trace           string         `json:"trace"`
	Requests        int            `json:"requests"`
	Engines         int            `json:"engines"`
	CapacityBlocks  int            `json:"capacity_blocks_per_engine"`
	BlockSize       int            `json:"block_size"`
	SpeedUp         float64        `json:"speed_up"`
	PrefillPerToken string         `json:"prefill_per_token"`
	DecodePerToken  string         `json:"decode_per_token"`
	Format          string         `json:"event_format"`
	RouterArgs      []string       `json:"router_args"`
	PooledCeiling   float64        `json:"pooled_ceiling_hit_rate"`
	UnlimitedIDHit  float64        `json:"unlimited_cache_hit_rate_512"`
	Results         []PolicyResult `json:"results"`
	Started         time.Time      `json:"started"`
}

// Compare runs every policy on a fresh fleet (so caches start empty) and
// a fresh router process where the policy needs one.
func Compare(ctx context.Context, cfg CompareConfig) (*Report, error) {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 16
	}
	if cfg.Model == "" {
		cfg.Model = "bench-model"
	}
	if len(cfg.Policies) == 0 {
		cfg.Policies = AllPolicies
	}
	if cfg.Engines <= 0 || cfg.Capacity <= 0 || cfg.SpeedUp <= 0 {
		return nil, fmt.Errorf("compare: engines (%d), capacity (%d) and speed-up (%v) must be positive", cfg.Engines, cfg.Capacity, cfg.SpeedUp)
	}
	rep := &Report{
		Requests: len(cfg.Requests), Engines: cfg.Engines, CapacityBlocks: cfg.Capacity,
		BlockSize: cfg.BlockSize, SpeedUp: cfg.SpeedUp,
		PrefillPerToken: cfg.PrefillPerToken.String(), DecodePerToken: cfg.DecodePerToken.String(),
		Format: cfg.Format.String(), RouterArgs: cfg.Router.Args, Started: time.Now().UTC(),
	}
	rep.PooledCeiling = cfg.PooledCeiling
	if rep.PooledCeiling <= 0 {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "computing the pooled ceiling (%d blocks)...\n", cfg.Engines*cfg.Capacity)
		}
		rep.PooledCeiling = trace.PooledCeiling(cfg.Requests, cfg.BlockSize, cfg.Engines*cfg.Capacity).HitRate()
	}
	rep.UnlimitedIDHit = trace.IDHitRate(cfg.Requests)
	for _, p := range cfg.Policies {
		r, err := runPolicy(ctx, cfg, p)
		if err != nil {
			return rep, fmt.Errorf("policy %s: %w", p, err)
		}
		if rep.PooledCeiling > 0 {
			r.HitRateOfCeiling = r.HitRate / rep.PooledCeiling
		}
		rep.Results = append(rep.Results, *r)
	}
	return rep, nil
}

func runPolicy(ctx context.Context, cfg CompareConfig, policy string) (*PolicyResult, error) {
	fleet, err := StartFleet(FleetConfig{
		Engines: cfg.Engines,
		Replay:  true,
		Engine: engine.Config{
			BlockSize: cfg.BlockSize, CapacityBlocks: cfg.Capacity, Format: cfg.Format,
			PrefillPerToken: cfg.PrefillPerToken, DecodePerToken: cfg.DecodePerToken,
		},
	})
	if err != nil {
		return nil, err
	}
	defer fleet.Close()

	var (
		choose ChooseFunc
		router *Router
	)
	switch policy {
	case PolicyKV, PolicyKVNoPredict:
		rc := cfg.Router
		rc.BlockSize = cfg.BlockSize
		rc.Args = append([]string(nil), cfg.Router.Args...)
		if policy == PolicyKVNoPredict {
			rc.Args = append(rc.Args, "--predict=false")
		}
		rc.Args = ScaleRouterArgs(rc.Args, cfg.SpeedUp)
		if cfg.OutDir != "" {
			lf, err := os.Create(filepath.Join(cfg.OutDir, "router-"+policy+".log"))
			if err != nil {
				return nil, err
			}
			defer lf.Close()
			rc.Log = lf
		}
		router, err = StartRouter(ctx, rc)
		if err != nil {
			return nil, err
		}
		defer router.Stop()
		if err := fleet.Register(ctx, router.Registry, cfg.Model, 20*time.Second); err != nil {
			return nil, err
		}
		choose = RouterChooser(router.Router, fleet, cfg.Model)
	case PolicyRoundRobin:
		choose = RoundRobin(cfg.Engines)
	case PolicyRandom:
		choose = Random(cfg.Engines, cfg.Seed)
	default:
		return nil, fmt.Errorf("unknown policy %q (want one of %s)", policy, strings.Join(AllPolicies, ", "))
	}

	pc := PlayConfig{
		Fleet: fleet, Requests: cfg.Requests, Choose: choose, IDPrefix: policy + "-",
		Clock: Clock{T0: time.Now().Add(200 * time.Millisecond), SpeedUp: cfg.SpeedUp},
	}
	if router != nil {
		pc.Router = router.Router
	}
	if cfg.Progress != nil {
		pc.OnProgress = func(p Progress) {
			t := fleet.Totals()
			hit := 0.0
			if t.PromptBlocks > 0 {
				hit = float64(t.CachedBlocks) / float64(t.PromptBlocks)
			}
			fmt.Fprintf(cfg.Progress, "%-18s %6d/%d requests  trace time %-9s  lag %-8s  hit %.1f%%\n",
				policy, p.Dispatched, p.Total, p.Sim.Truncate(time.Second), p.Lag.Truncate(time.Millisecond), 100*hit)
		}
	}
	pr, err := Play(ctx, pc)
	if err != nil {
		return nil, err
	}
	tot := fleet.Totals()
	res := &PolicyResult{
		Policy: policy, Requests: pr.Requests,
		PromptBlocks: tot.PromptBlocks, CachedBlocks: tot.CachedBlocks,
		PromptTokens:    pr.PromptTokens,
		TTFT:            stats.Summarize(pr.TTFT),
		Route:           stats.Summarize(pr.RouteLatency),
		EventsPublished: tot.Events,
		ChooseErrors:    pr.ChooseErrors, MarkErrors: pr.MarkErrors, FirstError: pr.FirstError,
		MaxLag: pr.MaxLag.Truncate(time.Millisecond).String(), WallSeconds: pr.Wall.Seconds(),
	}
	if tot.PromptBlocks > 0 {
		res.HitRate = float64(tot.CachedBlocks) / float64(tot.PromptBlocks)
	}
	if pr.RouterPromptBlocks > 0 {
		res.RouterHitRate = float64(pr.RouterMatched) / float64(pr.RouterPromptBlocks)
	}
	loads := make([]float64, len(pr.PromptTokens))
	for i, v := range pr.PromptTokens {
		loads[i] = float64(v)
	}
	res.Imbalance = stats.Imbalance(loads)
	work := make([]float64, len(fleet.Engines))
	for i, e := range fleet.Engines {
		s := e.Stats()
		work[i] = float64(s.PromptBlocks - s.CachedBlocks)
	}
	res.PrefillImbalance = stats.Imbalance(work)
	if router != nil {
		// Let the router drain what was published, then read its counters.
		deadline := time.Now().Add(10 * time.Second)
		var last uint64
		for stable := 0; ; {
			n, err := EventsApplied(ctx, router.Registry, cfg.Model)
			if err != nil {
				return nil, err
			}
			res.EventsApplied = n
			if n == last {
				stable++
			} else {
				stable = 0
			}
			last = n
			if n >= tot.Events || stable >= 3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if pr.Wall > 0 {
			res.EventsPerSec = float64(res.EventsApplied) / pr.Wall.Seconds()
		}
	}
	return res, nil
}
