package scoring

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// Config configures a Router. A field left zero takes its value in
// DefaultConfig.
type Config struct {
	// Index is the index of engine-reported blocks. Required.
	Index *radix.Index
	// BlockSize is the router block size in tokens.
	BlockSize int
	// MaxPromptTokens bounds a prompt; block_hashes prompts are bounded by
	// MaxPromptTokens/BlockSize blocks.
	MaxPromptTokens int
	// Policy is the cost function (policy.go); zero means PolicyTime.
	Policy Policy
	// PrefillTokensPerSecond is PolicyTime's prior for a rank's prefill
	// throughput, until MarkPrefillDone timings replace it (it weighs as
	// one timing). The default, 10,000, is the order of one current GPU
	// prefilling a 7-8B model; a wrong prior costs only the first Routes.
	PrefillTokensPerSecond float64
	// RankRates makes PolicyTime learn each rank's own seconds per prefill
	// token (shrunk toward its model's) instead of using its model's rate
	// for every rank. Off by default: the rate is learned from busy
	// intervals between MarkPrefillDone calls, which are a rank's service
	// times only on an engine that prefills one request at a time. On an
	// engine that batches (vLLM, SGLang) a rank's intervals measure its
	// load as much as its speed: a lightly loaded rank's interval is a
	// whole request's latency, step overhead and the batch's decode
	// included, while a loaded rank's prefills finish back to back and
	// share intervals, so identical ranks learn rates that differ with
	// their load, the busiest looking the fastest, and the cost piles
	// requests onto it. The model's rate averages over its ranks' loads.
	// Turn it on for a fleet of unlike GPUs whose engines prefill serially.
	RankRates bool
	// PrefillWeight multiplies prefill blocks in PolicyBlocks' cost. DefaultConfig's
	// weight is above 1 because on the Mooncake trace in bench/ 2.0 beat 1.0
	// on hit rate and TTFT at every cache size measured, with the same
	// balance (docs/benchmarks.md has the sweep).
	PrefillWeight float64
	// TierWeights is the overlap credit of a matched block by its best tier,
	// indexed by kv.Tier; each within 0..1.
	TierWeights *[kv.NumTiers]float64
	// MaxActivePrefillTokens excludes a candidate whose active prefill tokens
	// reach it (0: off).
	MaxActivePrefillTokens int64
	// MaxActiveDecodeBlocks excludes a candidate whose active decode blocks reach
	// it (0: off).
	MaxActiveDecodeBlocks int64
	// BalanceFactor is the bounded-load guard's c (balance.go): a Route's
	// candidates are the ranks whose recent routed prefill (the prompt blocks
	// of the requests routed to them that they did not hold, decayed over a
	// window of routed requests) is at most c x the model's mean with the
	// request counted on a rank holding the whole prompt, (1 + c) / 2 x on
	// one holding none of it, so no rank ends a Route above c x the mean
	// plus that one request. Must be >= 1 (1: strict balance, the cost
	// chooses only among ranks at or below the mean). The default, 1.3, is
	// the operator's headroom: a rank takes at most 30% over its share of
	// the fleet's prefill (plus one request).
	BalanceFactor float64
	// DisableBalance turns the bounded-load guard off.
	DisableBalance bool
	// RequestTTL expires routed requests never finished.
	RequestTTL time.Duration
	// DisablePrediction turns off the predicted-blocks overlay for workers with events.
	DisablePrediction bool
	// PredictionTTL bounds a predicted block's life.
	PredictionTTL time.Duration
	// PredictionCapacity bounds predicted blocks per rank of a worker with events.
	PredictionCapacity int
	// PredictionMaxBlocks bounds the blocks one Route predicts, past the
	// chosen rank's matched prefix.
	PredictionMaxBlocks int
	// ApproxCapacity bounds predicted blocks per rank of a worker without events,
	// which is routed from predictions alone (LRU-evicted).
	ApproxCapacity int
	// Seed seeds the tie-break and sampling randomness (0: random).
	Seed uint64

	// MaxMMItems bounds a prompt's multimodal items.
	MaxMMItems int
	// MaxRequestIDBytes bounds a request_id's length in bytes.
	MaxRequestIDBytes int
	// MaxActiveRequests bounds the routed requests (with a request_id) not
	// yet finished or expired; a Route past it is refused.
	MaxActiveRequests int
	// MaxWorkers bounds the registered workers.
	MaxWorkers int

	// OnChange, when set, is told every change a Route or a mark makes to
	// the load and predictions, so replicas can share them (replica.go).
	// It is called on the caller's goroutine, under the Router's read
	// lock: it must be quick and must not call the Router.
	OnChange func(LoadChange)
	// Place, when set (cluster mode), reports this replica's place among
	// the live replicas (0-based, by replica id) and their number: with two
	// or more, a Route breaks near-ties toward the ranks this replica owns,
	// so replicas deciding one burst at once diverge (spread.go). Nil: one
	// router, whose choices this leaves unchanged.
	Place func() (place, replicas int)
	// Forward, when set (cluster mode), is offered every Route after its
	// prompt is checked and hashed: it passes the Route to the replica
	// that decides for the cluster and, when that replica answered, fills
	// dec with its decision and returns true; false leaves the Route to
	// this replica (forward.go). An error with true is the decider's
	// refusal that stands for the cluster (ErrAlreadyExists: the request
	// id is active there), which the Route returns. The decider records
	// the request's load and predictions, which reach this replica with
	// its changes. Nil: one router, or replicas that each decide.
	Forward func(fr *ForwardedRoute, dec *Decision) (bool, error)

	// approxTTL bounds a predicted block's life on a worker without events.
	// No caller outside the package sets it; its tests shorten it.
	approxTTL time.Duration
	// now is the clock; tests set it.
	now func() time.Time
}

// defaultTierWeights is the overlap credit per tier: device, host, disk, external.
var defaultTierWeights = [kv.NumTiers]float64{1.0, 0.75, 0.25, 0.0}

// DefaultConfig returns the values New gives the fields a Config leaves zero.
// Index and Seed have none. cmd/router starts its flags from it, so the
// defaults are written only here.
func DefaultConfig() Config {
	w := defaultTierWeights // a copy: callers may write through the pointer
	return Config{
		BlockSize:              16,
		MaxPromptTokens:        262144,
		Policy:                 PolicyTime,
		PrefillTokensPerSecond: 10000,
		PrefillWeight:          2.0,
		BalanceFactor:          1.3,
		TierWeights:            &w,
		RequestTTL:             5 * time.Minute,
		PredictionTTL:          2 * time.Minute,
		PredictionCapacity:     8192,
		PredictionMaxBlocks:    64, // 1,024 tokens at block size 16
		ApproxCapacity:         16384,
		MaxMMItems:             1024,
		MaxRequestIDBytes:      256,
		MaxActiveRequests:      100_000,
		MaxWorkers:             10_000,
		approxTTL:              time.Hour,
		now:                    time.Now,
	}
}

// withDefaults fills c's zero fields from DefaultConfig and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Index == nil {
		return Config{}, errors.New("scoring: Config.Index is required")
	}
	d := DefaultConfig()
	if c.BlockSize <= 0 {
		c.BlockSize = d.BlockSize
	}
	if c.MaxPromptTokens <= 0 {
		c.MaxPromptTokens = d.MaxPromptTokens
	}
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	if _, err := ParsePolicy(string(c.Policy)); err != nil {
		return Config{}, err
	}
	if c.PrefillTokensPerSecond == 0 {
		c.PrefillTokensPerSecond = d.PrefillTokensPerSecond
	}
	if !(c.PrefillTokensPerSecond > 0) || math.IsInf(c.PrefillTokensPerSecond, 0) {
		return Config{}, fmt.Errorf("scoring: prefill tokens per second %v must be a finite number > 0", c.PrefillTokensPerSecond)
	}
	if c.PrefillWeight == 0 {
		c.PrefillWeight = d.PrefillWeight
	}
	if c.PrefillWeight < 0 {
		return Config{}, fmt.Errorf("scoring: prefill weight %v is negative", c.PrefillWeight)
	}
	if c.BalanceFactor == 0 {
		c.BalanceFactor = d.BalanceFactor
	}
	if !(c.BalanceFactor >= 1) || math.IsInf(c.BalanceFactor, 0) {
		return Config{}, fmt.Errorf("scoring: balance factor %v must be a finite number >= 1", c.BalanceFactor)
	}
	if c.RequestTTL <= 0 {
		c.RequestTTL = d.RequestTTL
	}
	if c.PredictionTTL <= 0 {
		c.PredictionTTL = d.PredictionTTL
	}
	if c.PredictionMaxBlocks <= 0 {
		c.PredictionMaxBlocks = d.PredictionMaxBlocks
	}
	if c.PredictionCapacity <= 0 {
		c.PredictionCapacity = d.PredictionCapacity
	}
	if c.ApproxCapacity <= 0 {
		c.ApproxCapacity = d.ApproxCapacity
	}
	if c.MaxMMItems <= 0 {
		c.MaxMMItems = d.MaxMMItems
	}
	if c.MaxRequestIDBytes <= 0 {
		c.MaxRequestIDBytes = d.MaxRequestIDBytes
	}
	if c.MaxActiveRequests <= 0 {
		c.MaxActiveRequests = d.MaxActiveRequests
	}
	if c.MaxWorkers <= 0 {
		c.MaxWorkers = d.MaxWorkers
	}
	if c.approxTTL <= 0 {
		c.approxTTL = d.approxTTL
	}
	if c.now == nil {
		c.now = d.now
	}
	if c.TierWeights == nil {
		c.TierWeights = d.TierWeights
	}
	for i, v := range c.TierWeights {
		if v < 0 || v > 1 || math.IsNaN(v) {
			return Config{}, fmt.Errorf("scoring: tier weight %d is %v, want 0..1", i, v)
		}
	}
	return c, nil
}

// Limits are the bounds a Router puts on a call's work and on its tables.
type Limits struct {
	MaxPromptTokens   int
	MaxMMItems        int
	MaxRequestIDBytes int
	MaxActiveRequests int
	MaxWorkers        int
}

// Limits returns the bounds r enforces (its Config's, defaults filled in).
func (r *Router) Limits() Limits {
	return Limits{
		MaxPromptTokens:   r.cfg.MaxPromptTokens,
		MaxMMItems:        r.cfg.MaxMMItems,
		MaxRequestIDBytes: r.cfg.MaxRequestIDBytes,
		MaxActiveRequests: r.cfg.MaxActiveRequests,
		MaxWorkers:        r.cfg.MaxWorkers,
	}
}
