package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/gateway"
	"github.com/kvrouter/kvrouter/bench/stats"
	"github.com/kvrouter/kvrouter/bench/trace"
	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
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
func RouterChooser(rc kvrouterv1.RouterClient, f *harness.Fleet, model string) ChooseFunc {
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
		return routeChoice(f, resp, lat)
	}
}

// GatewayChooser is RouterChooser through a gateway over replicas: g asks
// their Route in turn.
func GatewayChooser(g *harness.Gateway, f *harness.Fleet, model string) ChooseFunc {
	return func(ctx context.Context, seq int, tokens []uint32, id string) (Choice, error) {
		req := &kvrouterv1.RouteRequest{
			Prompt:        &kvrouterv1.Prompt{Model: model, TokenIds: tokens},
			RequestId:     id,
			MaxCandidates: 1,
		}
		resp, lat, err := g.Route(ctx, req)
		if err != nil {
			return Choice{}, err
		}
		return routeChoice(f, resp, lat)
	}
}

// routeChoice maps a Route answer to the fleet.
func routeChoice(f *harness.Fleet, resp *kvrouterv1.RouteResponse, lat time.Duration) (Choice, error) {
	i, ok := f.Index(resp.WorkerId)
	if !ok {
		return Choice{}, fmt.Errorf("route chose unknown worker %q", resp.WorkerId)
	}
	return Choice{Engine: i, Routed: true, RouteLatency: lat, Matched: resp.MatchedBlocks, PromptBlocks: resp.PromptBlocks}, nil
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
	// EngineModel selects the engines' model; MaxNumBatchedTokens and
	// MaxNumSeqs configure ModelVLLM (its defaults when zero).
	EngineModel                     engine.Model
	MaxNumBatchedTokens, MaxNumSeqs int
	// SpeedUp divides trace time into wall time.
	SpeedUp float64
	// Lockstep replays the vLLM engine model in lockstep (lockstep.go): the
	// router's view at each Route is the fleet at the request's arrival,
	// however long the machine takes, and SpeedUp only paces the replay.
	Lockstep bool
	// Model is the model name engines register under.
	Model string
	// Router is the subprocess template (binary, extra flags).
	Router harness.RouterConfig
	// Policies to run, in order (default AllPolicies).
	Policies []string
	// OutDir receives router logs; empty discards them.
	OutDir string
	// Records writes each variant's RequestRecords to
	// OutDir/requests-<label>.jsonl (vLLM engine model, OutDir set).
	Records bool
	// Progress receives a progress line every few seconds; nil for none.
	Progress io.Writer
	// Seed seeds the random policy.
	Seed uint64
	// Replicas, when set, runs each router policy once per entry with that
	// many routers behind a round-robin Gateway (1 included); empty runs one
	// router called directly.
	Replicas []int
	// Sync lists, for each replica count, whether the routers run in cluster
	// mode on an embedded NATS server (true) or as independent routers each
	// registered with every engine (false, the ablation). Empty: [true].
	Sync []bool
	// Marks is where the gateway sends marks (harness.MarksSpread by default).
	Marks string
	// RoutesToFirst makes the gateway send every Route to replica 0
	// (harness.GatewayConfig.RoutesToFirst).
	RoutesToFirst bool
	// KillAt, in (0, 1), sends replica KillReplica SIGKILL once that fraction
	// of the requests has been routed, in runs with more than one replica;
	// every run reports its hit rate before and after that point.
	KillAt      float64
	KillReplica int
	// Rounds repeats the whole list of runs (A B A B ...; default 1).
	Rounds int
	// SyncLagProbes, in cluster runs with two replicas besides the one
	// KillAt kills, probes the replicas' sync lag that many times during the
	// replay (MeasureSyncLag, from a quarter of the trace on); 0: none.
	SyncLagProbes int
	// PooledCeiling, when positive, is the pooled ceiling's hit rate for
	// Requests at Engines x Capacity, computed by the caller (a sweep shares
	// it between runs); zero computes it.
	PooledCeiling float64
	// Text, if set, replays prompts as text (text.go): Route gets Prompt.text(seq) and the
	// engines, given Tokenizer, tokenize it themselves. The router must know Model's tokenizer
	// (--model in Router.Args). One router called directly only.
	Text      func(seq int) string
	Tokenizer *tokenizer.Tokenizer
	// TextBody makes Text's strings OpenAI bodies; ChatTemplate renders chat ones on the engines.
	TextBody     bool
	ChatTemplate *chattemplate.Template
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
	// TPOT is the time per output token after the first (vLLM engine model
	// only): what a rank piled with decode context costs its requests.
	TPOT  stats.Summary `json:"tpot"`
	Route stats.Summary `json:"route_latency"`
	// RouterHitRate is matched / prompt blocks as Route answered (the router's view).
	RouterHitRate   float64 `json:"router_hit_rate"`
	EventsPublished uint64  `json:"events_published"`
	// Preemptions (vLLM engine model) and Dropped (requests an engine refused).
	Preemptions   uint64  `json:"preemptions,omitempty"`
	Dropped       int64   `json:"dropped,omitempty"`
	EventsApplied uint64  `json:"events_applied"`
	EventsPerSec  float64 `json:"events_applied_per_sec"`
	ChooseErrors  int     `json:"choose_errors"`
	MarkErrors    int64   `json:"mark_errors"`
	FirstError    string  `json:"first_error,omitempty"`
	MaxLag        string  `json:"max_dispatch_lag"`
	WallSeconds   float64 `json:"wall_seconds"`
	// PausedSeconds is how long a lockstep replay held simulated time still
	// (wall seconds); Unsettled counts the arrivals it let go before every
	// router had applied what the engines published (a router that did not
	// catch up within UnsettledAfter, or that stopped answering).
	PausedSeconds float64 `json:"paused_seconds,omitempty"`
	Unsettled     int64   `json:"unsettled,omitempty"`

	// BurstPiled is the share of the requests arriving with others at one
	// instant that went to an engine an earlier one of that instant went
	// to (burst.go).
	BurstPiled float64 `json:"burst_piled"`
	// Diverted is the share of the Routes whose cheapest candidate the
	// bounded-load guard held back (kvrouter_route_balance_diverted_total,
	// summed over the replicas still running at the end: a killed one's
	// are left out).
	Diverted float64 `json:"diverted"`

	// Replicas is the number of routers behind the gateway (0: one router
	// called directly); Sync whether they ran in cluster mode; Round which
	// repetition of the runs this is.
	Replicas int  `json:"replicas,omitempty"`
	Sync     bool `json:"sync,omitempty"`
	Round    int  `json:"round,omitempty"`
	// RouterCPUSeconds is the CPU time every router process used during the
	// replay (Route, marks, event ingestion, sync); RouterCPUPerRoute is that
	// over the Routes, in microseconds.
	RouterCPUSeconds  float64 `json:"router_cpu_seconds,omitempty"`
	RouterCPUPerRoute float64 `json:"router_cpu_us_per_route,omitempty"`
	// NATS is the embedded server's traffic during the replay (cluster mode),
	// in and out, less what it sent kvbench's own tap; NATSPublished is
	// what was published, by kind of subject (load, state, registry,
	// snapshots, jetstream-api, ...), and Load* the load subjects' share
	// per Route.
	NATS              *harness.NATSTraffic        `json:"nats,omitempty"`
	NATSMsgsPerRoute  float64                     `json:"nats_msgs_per_route,omitempty"`
	NATSBytesPerRoute float64                     `json:"nats_bytes_per_route,omitempty"`
	NATSPublished     map[string]harness.NATSFlow `json:"nats_published,omitempty"`
	LoadMsgsPerRoute  float64                     `json:"nats_load_msgs_published_per_route,omitempty"`
	LoadBytesPerRoute float64                     `json:"nats_load_bytes_published_per_route,omitempty"`
	Gateway           *harness.GatewayStats       `json:"gateway,omitempty"`
	// HTTPGateway is bench's HTTP gateway's totals (PolicyKVEPPHTTP).
	HTTPGateway *gateway.Stats `json:"http_gateway,omitempty"`
	// Split is the hit rate before and after the KillAt point; Failover what
	// the kill did, in runs that killed a replica.
	Split    *HitSplit `json:"split,omitempty"`
	Failover *Failover `json:"failover,omitempty"`
	// ActiveAfter is each replica's kvrouter_active_requests after every
	// request finished (-1 for a killed replica): requests it still holds.
	ActiveAfter []float64 `json:"active_requests_after,omitempty"`
	// SyncLag is the probed lag of a Route's state reaching another replica.
	SyncLag      *SyncLag `json:"sync_lag,omitempty"`
	SyncLagError string   `json:"sync_lag_error,omitempty"`
	// Tokenization is the router's drift check of a text run (text.go).
	Tokenization *TokenizationCheck `json:"tokenization,omitempty"`
}

// Label names the run: the policy, and with replicas their count and mode.
func (p *PolicyResult) Label() string {
	if p.Replicas == 0 {
		return p.Policy
	}
	mode := "nosync"
	if p.Sync {
		mode = "sync"
	}
	return fmt.Sprintf("%s x%d %s", p.Policy, p.Replicas, mode)
}

// HitSplit is the engines' hit rate over the requests served before and
// after a point of the replay.
type HitSplit struct {
	AtRequest int     `json:"at_request"`
	Before    float64 `json:"hit_rate_before"`
	After     float64 `json:"hit_rate_after"`
}

// Failover is what killing one replica mid-run cost.
type Failover struct {
	Replica   int     `json:"replica"`
	AtRequest int     `json:"at_request"`
	AtSeconds float64 `json:"at_wall_seconds"`
	// RoutesInFlight were unanswered when the kill was sent.
	RoutesInFlight int64 `json:"routes_in_flight"`
	// After are the gateway's counters from the replica's death to the end.
	After     harness.GatewayStats `json:"gateway_after"`
	KillError string               `json:"kill_error,omitempty"`
}

// Report is the whole comparison.
type Report struct {
	Trace           string   `json:"trace"`
	Requests        int      `json:"requests"`
	Engines         int      `json:"engines"`
	CapacityBlocks  int      `json:"capacity_blocks_per_engine"`
	BlockSize       int      `json:"block_size"`
	SpeedUp         float64  `json:"speed_up"`
	Lockstep        bool     `json:"lockstep,omitempty"`
	PrefillPerToken string   `json:"prefill_per_token"`
	DecodePerToken  string   `json:"decode_per_token"`
	Format          string   `json:"event_format"`
	EngineModel     string   `json:"engine_model"`
	RouterArgs      []string `json:"router_args"`
	PooledCeiling   float64  `json:"pooled_ceiling_hit_rate"`
	UnlimitedIDHit  float64  `json:"unlimited_cache_hit_rate_512"`
	// GatewayMarks and RoutesToFirst are the replica gateway's settings.
	GatewayMarks  string         `json:"gateway_marks,omitempty"`
	RoutesToFirst bool           `json:"gateway_routes_to_first,omitempty"`
	Results       []PolicyResult `json:"results"`
	Started       time.Time      `json:"started"`
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
	if cfg.Lockstep && cfg.EngineModel != engine.ModelVLLM {
		return nil, fmt.Errorf("compare: lockstep needs the vLLM engine model, not %s", cfg.EngineModel)
	}
	rep := &Report{
		Requests: len(cfg.Requests), Engines: cfg.Engines, CapacityBlocks: cfg.Capacity,
		BlockSize: cfg.BlockSize, SpeedUp: cfg.SpeedUp, Lockstep: cfg.Lockstep,
		PrefillPerToken: cfg.PrefillPerToken.String(), DecodePerToken: cfg.DecodePerToken.String(),
		Format: cfg.Format.String(), RouterArgs: cfg.Router.Args, Started: time.Now().UTC(),
		EngineModel: cfg.EngineModel.String(),
	}
	if len(cfg.Replicas) > 0 {
		rep.GatewayMarks, rep.RoutesToFirst = cfg.Marks, cfg.RoutesToFirst
		if rep.GatewayMarks == "" {
			rep.GatewayMarks = harness.MarksSpread
		}
	}
	rep.PooledCeiling = cfg.PooledCeiling
	if rep.PooledCeiling <= 0 {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "computing the pooled ceiling (%d blocks)...\n", cfg.Engines*cfg.Capacity)
		}
		rep.PooledCeiling = trace.PooledCeiling(cfg.Requests, cfg.BlockSize, cfg.Engines*cfg.Capacity).HitRate()
	}
	rep.UnlimitedIDHit = trace.IDHitRate(cfg.Requests)
	vs, err := cfg.variants()
	if err != nil {
		return rep, err
	}
	if err := cfg.checkText(); err != nil {
		return rep, err
	}
	for _, v := range vs {
		r, err := runPolicy(ctx, cfg, v)
		if err != nil {
			return rep, fmt.Errorf("policy %s: %w", v.label(), err)
		}
		if rep.PooledCeiling > 0 {
			r.HitRateOfCeiling = r.HitRate / rep.PooledCeiling
		}
		rep.Results = append(rep.Results, *r)
	}
	return rep, nil
}

// variant is one run of a comparison.
type variant struct {
	policy   string
	replicas int // 0: one router called directly
	sync     bool
	round    int
}

func (v variant) label() string {
	r := PolicyResult{Policy: v.policy, Replicas: v.replicas, Sync: v.sync}
	return r.Label()
}

// fileName names the variant's files in OutDir (router logs, request
// records): its label without spaces, and its round past the first.
func (v variant) fileName() string {
	name := strings.ReplaceAll(v.label(), " ", "-")
	if v.round > 0 {
		name += "-round" + strconv.Itoa(v.round)
	}
	return name
}

func isRouterPolicy(p string) bool {
	return p == PolicyKV || p == PolicyKVNoPredict || p == PolicyKVEPP || p == PolicyKVEPPHTTP
}

// variants lists the runs in order: every policy (each router policy once per
// replica count and sync mode), the whole list Rounds times.
func (cfg *CompareConfig) variants() ([]variant, error) {
	syncs := cfg.Sync
	if len(syncs) == 0 {
		syncs = []bool{true}
	}
	if cfg.KillAt < 0 || cfg.KillAt >= 1 {
		return nil, fmt.Errorf("compare: kill at %v: want a fraction in (0, 1)", cfg.KillAt)
	}
	for _, n := range cfg.Replicas {
		if n < 1 {
			return nil, fmt.Errorf("compare: replicas %d: want at least 1", n)
		}
		if cfg.KillAt > 0 && n > 1 && (cfg.KillReplica < 0 || cfg.KillReplica >= n) {
			return nil, fmt.Errorf("compare: kill replica %d of %d", cfg.KillReplica, n)
		}
	}
	var vs []variant
	for round := 0; round < max(cfg.Rounds, 1); round++ {
		for _, p := range cfg.Policies {
			if !isRouterPolicy(p) || len(cfg.Replicas) == 0 {
				vs = append(vs, variant{policy: p, round: round})
				continue
			}
			for _, n := range cfg.Replicas {
				for _, s := range syncs {
					vs = append(vs, variant{policy: p, replicas: n, sync: s, round: round})
				}
			}
		}
	}
	return vs, nil
}
