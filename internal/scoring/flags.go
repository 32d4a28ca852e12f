package scoring

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// Options is scoring's part of the router's configuration: its YAML keys
// (inlined at the top level of the file) and its flags. The defaults are
// DefaultConfig's.
type Options struct {
	BlockSize         int `yaml:"block_size"`
	MaxPromptTokens   int `yaml:"max_prompt_tokens"`
	MaxMMItems        int `yaml:"max_mm_items"`
	MaxRequestIDBytes int `yaml:"max_request_id_bytes"`
	MaxActiveRequests int `yaml:"max_active_requests"`
	MaxWorkers        int `yaml:"max_workers"`

	Policy                 string        `yaml:"policy"`
	PrefillTokensPerSecond float64       `yaml:"prefill_tokens_per_second"`
	RankRates              bool          `yaml:"rank_rates"`
	PrefillWeight          float64       `yaml:"prefill_weight"`
	BalanceFactor          float64       `yaml:"balance_factor"`
	TierWeights            TierWeights   `yaml:"tier_weights"`
	MaxActivePrefillTokens int64         `yaml:"max_active_prefill_tokens"`
	MaxActiveDecodeBlocks  int64         `yaml:"max_active_decode_blocks"`
	RequestTTL             time.Duration `yaml:"request_ttl"`

	Predict             bool          `yaml:"predict"`
	PredictionTTL       time.Duration `yaml:"prediction_ttl"`
	PredictionCapacity  int           `yaml:"prediction_capacity"`
	PredictionMaxBlocks int           `yaml:"prediction_max_blocks"`
	ApproxCapacity      int           `yaml:"approx_capacity"`
}

// DefaultOptions are DefaultConfig's values as Options.
func DefaultOptions() Options {
	d := DefaultConfig()
	return Options{
		BlockSize:              d.BlockSize,
		MaxPromptTokens:        d.MaxPromptTokens,
		MaxMMItems:             d.MaxMMItems,
		MaxRequestIDBytes:      d.MaxRequestIDBytes,
		MaxActiveRequests:      d.MaxActiveRequests,
		MaxWorkers:             d.MaxWorkers,
		Policy:                 string(d.Policy),
		PrefillTokensPerSecond: d.PrefillTokensPerSecond,
		RankRates:              d.RankRates,
		PrefillWeight:          d.PrefillWeight,
		BalanceFactor:          d.BalanceFactor,
		TierWeights:            tierWeightsOf(*d.TierWeights),
		RequestTTL:             d.RequestTTL,
		Predict:                !d.DisablePrediction,
		PredictionTTL:          d.PredictionTTL,
		PredictionCapacity:     d.PredictionCapacity,
		PredictionMaxBlocks:    d.PredictionMaxBlocks,
		ApproxCapacity:         d.ApproxCapacity,
	}
}

// RegisterFlags binds o's fields to flags of fs, o's values the defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "router block size in tokens")
	fs.IntVar(&o.MaxPromptTokens, "max-prompt-tokens", o.MaxPromptTokens, "longest prompt accepted, in tokens")
	fs.IntVar(&o.MaxMMItems, "max-mm-items", o.MaxMMItems, "most multimodal items in one prompt")
	fs.IntVar(&o.MaxRequestIDBytes, "max-request-id-bytes", o.MaxRequestIDBytes, "longest request_id accepted, in bytes")
	fs.IntVar(&o.MaxActiveRequests, "max-active-requests", o.MaxActiveRequests, "most routed requests (with a request_id) active at once; Route past it is refused")
	fs.IntVar(&o.MaxWorkers, "max-workers", o.MaxWorkers, "most registered workers")
	fs.StringVar(&o.Policy, "policy", o.Policy, "cost function: time (expected time to first token plus the prefill the choice costs later requests, learned online) or blocks (prefill-weight x prefill blocks + decode blocks)")
	fs.Float64Var(&o.PrefillTokensPerSecond, "prefill-tokens-per-second", o.PrefillTokensPerSecond, "policy time: prior prefill throughput of a rank, until MarkPrefillDone timings replace it")
	fs.BoolVar(&o.RankRates, "rank-rates", o.RankRates, "policy time: learn each worker's own prefill rate instead of the model's (only for engines that prefill one request at a time: a batching engine's timings measure its load, not its speed)")
	fs.Float64Var(&o.PrefillWeight, "prefill-weight", o.PrefillWeight, "policy blocks: weight of prefill blocks in the cost")
	fs.Float64Var(&o.BalanceFactor, "balance-factor", o.BalanceFactor, "bounded load: route only to workers whose recent routed prefill (the prompt blocks routed to them that they did not hold, decayed over a window of routed requests) stays within this factor of the fleet's mean, plus the request; halfway to it for a worker holding none of the prompt (>= 1; 0: off)")
	fs.Var(&o.TierWeights, "tier-weights", "overlap credit per tier: device,host,disk,external")
	fs.Int64Var(&o.MaxActivePrefillTokens, "max-active-prefill-tokens", o.MaxActivePrefillTokens, "exclude a worker at this many active prefill tokens (0: off)")
	fs.Int64Var(&o.MaxActiveDecodeBlocks, "max-active-decode-blocks", o.MaxActiveDecodeBlocks, "exclude a worker at this many active decode blocks (0: off)")
	fs.DurationVar(&o.RequestTTL, "request-ttl", o.RequestTTL, "expire routed requests never finished after this long")
	fs.BoolVar(&o.Predict, "predict", o.Predict, "count a routed prompt's blocks as cached on the chosen worker until events confirm")
	fs.DurationVar(&o.PredictionTTL, "prediction-ttl", o.PredictionTTL, "life of a predicted block")
	fs.IntVar(&o.PredictionCapacity, "prediction-capacity", o.PredictionCapacity, "predicted blocks kept per rank of a worker with events")
	fs.IntVar(&o.PredictionMaxBlocks, "prediction-max-blocks", o.PredictionMaxBlocks, "blocks one Route predicts past the chosen worker's matched prefix")
	fs.IntVar(&o.ApproxCapacity, "approx-capacity", o.ApproxCapacity, "predicted blocks kept per rank of a worker without events")
}

// Validate refuses, naming the key, every value Config would replace
// silently with its default (a zero) or refuse later.
func (o *Options) Validate() error {
	positive := []struct {
		key string
		v   int64
	}{
		{"block_size", int64(o.BlockSize)}, {"max_prompt_tokens", int64(o.MaxPromptTokens)},
		{"max_mm_items", int64(o.MaxMMItems)}, {"max_request_id_bytes", int64(o.MaxRequestIDBytes)},
		{"max_active_requests", int64(o.MaxActiveRequests)}, {"max_workers", int64(o.MaxWorkers)},
		{"request_ttl", int64(o.RequestTTL)}, {"prediction_ttl", int64(o.PredictionTTL)},
		{"prediction_capacity", int64(o.PredictionCapacity)}, {"prediction_max_blocks", int64(o.PredictionMaxBlocks)},
		{"approx_capacity", int64(o.ApproxCapacity)},
	}
	for _, p := range positive {
		if p.v <= 0 {
			return fmt.Errorf("config: %s %v must be positive", p.key, p.v)
		}
	}
	switch {
	case o.Policy != string(PolicyTime) && o.Policy != string(PolicyBlocks):
		return fmt.Errorf("config: policy %q: want %s or %s", o.Policy, PolicyTime, PolicyBlocks)
	case !(o.PrefillTokensPerSecond > 0) || math.IsInf(o.PrefillTokensPerSecond, 0):
		return fmt.Errorf("config: prefill_tokens_per_second %v must be a finite number > 0", o.PrefillTokensPerSecond)
	case !(o.PrefillWeight > 0) || math.IsInf(o.PrefillWeight, 0):
		// 0 is refused rather than passed on: Config reads it as unset.
		return fmt.Errorf("config: prefill_weight %v must be a finite number > 0", o.PrefillWeight)
	case o.BalanceFactor != 0 && !(o.BalanceFactor >= 1 && !math.IsInf(o.BalanceFactor, 0)):
		return fmt.Errorf("config: balance_factor %v must be 0 (off) or a finite number >= 1", o.BalanceFactor)
	case o.MaxActivePrefillTokens < 0:
		return fmt.Errorf("config: max_active_prefill_tokens %d must be >= 0 (0: off)", o.MaxActivePrefillTokens)
	case o.MaxActiveDecodeBlocks < 0:
		return fmt.Errorf("config: max_active_decode_blocks %d must be >= 0 (0: off)", o.MaxActiveDecodeBlocks)
	}
	return o.TierWeights.validate()
}

// Config is the Config of o on index.
func (o *Options) Config(index *radix.Index) Config {
	weights := o.TierWeights.array()
	return Config{
		Index:                  index,
		BlockSize:              o.BlockSize,
		MaxPromptTokens:        o.MaxPromptTokens,
		Policy:                 Policy(o.Policy),
		PrefillTokensPerSecond: o.PrefillTokensPerSecond,
		RankRates:              o.RankRates,
		PrefillWeight:          o.PrefillWeight,
		BalanceFactor:          o.BalanceFactor,
		DisableBalance:         o.BalanceFactor == 0,
		TierWeights:            &weights,
		MaxActivePrefillTokens: o.MaxActivePrefillTokens,
		MaxActiveDecodeBlocks:  o.MaxActiveDecodeBlocks,
		RequestTTL:             o.RequestTTL,
		DisablePrediction:      !o.Predict,
		PredictionTTL:          o.PredictionTTL,
		PredictionCapacity:     o.PredictionCapacity,
		PredictionMaxBlocks:    o.PredictionMaxBlocks,
		ApproxCapacity:         o.ApproxCapacity,
		MaxMMItems:             o.MaxMMItems,
		MaxRequestIDBytes:      o.MaxRequestIDBytes,
		MaxActiveRequests:      o.MaxActiveRequests,
		MaxWorkers:             o.MaxWorkers,
	}
}

// TierWeights is the overlap credit per storage tier, by name: the
// tier_weights key and the --tier-weights flag.
type TierWeights struct {
	Device   float64 `yaml:"device"`
	Host     float64 `yaml:"host"`
	Disk     float64 `yaml:"disk"`
	External float64 `yaml:"external"`
}

// String formats the weights as the --tier-weights flag takes them.
func (t *TierWeights) String() string {
	return fmt.Sprintf("%g,%g,%g,%g", t.Device, t.Host, t.Disk, t.External)
}

// Set parses "device,host,disk,external".
func (t *TierWeights) Set(s string) error {
	parts := strings.Split(s, ",")
	if len(parts) != 4 {
		return fmt.Errorf("want four comma-separated weights (device,host,disk,external), got %q", s)
	}
	var v [4]float64
	for i, p := range parts {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
		v[i] = f
	}
	*t = TierWeights{v[0], v[1], v[2], v[3]}
	return nil
}

func (t *TierWeights) validate() error {
	for _, w := range []struct {
		name string
		v    float64
	}{{"device", t.Device}, {"host", t.Host}, {"disk", t.Disk}, {"external", t.External}} {
		if !(w.v >= 0 && w.v <= 1) {
			return fmt.Errorf("config: tier_weights.%s %v must be within 0..1", w.name, w.v)
		}
	}
	return nil
}

func tierWeightsOf(w [kv.NumTiers]float64) TierWeights {
	return TierWeights{Device: w[kv.TierDevice], Host: w[kv.TierHost], Disk: w[kv.TierDisk], External: w[kv.TierExternal]}
}

func (t *TierWeights) array() [kv.NumTiers]float64 {
	return [kv.NumTiers]float64{kv.TierDevice: t.Device, kv.TierHost: t.Host, kv.TierDisk: t.Disk, kv.TierExternal: t.External}
}
