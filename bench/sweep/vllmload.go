package sweep

import (
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/trace"
)

// VLLMTokenCost is, for engines of the vLLM model with capacityBlocks KV
// blocks, the engine time a trace's requests cost per prompt token when
// nothing is cached: what --prefill-per-token is to the old model, so that
// offered load keeps meaning "fraction of round-robin's capacity".
//
// A vLLM engine's capacity is set by its decode batch as much as by its
// prefills: a prompt token costs PerPrefillToken, and the request's output
// tokens share steps with the rest of a batch as large as the KV blocks
// (or MaxNumSeqs) allow when the engine is saturated. With mean prompt P and
// output O tokens, a request holds P+O/2 tokens of KV on average, the batch
// is B = min(MaxNumSeqs, blocks x block size / (P+O/2)), a decode step takes
// Base + B x (PerDecodeSeq + (P+O/2) x PerKVToken), and one request costs
// P x PerPrefillToken + O x step / B.
func VLLMTokenCost(reqs []trace.Request, capacityBlocks int, sc engine.SchedConfig) time.Duration {
	prefill, decode, p := vllmRequestCost(reqs, capacityBlocks, sc)
	if p <= 0 {
		return 0
	}
	return time.Duration((prefill + decode) / p * float64(time.Second))
}

// VLLMPrefillShare is the share of VLLMTokenCost that is prefill: the part a
// cache hit saves. The rest, the request's share of decode steps, every
// routing pays.
func VLLMPrefillShare(reqs []trace.Request, capacityBlocks int, sc engine.SchedConfig) float64 {
	prefill, decode, _ := vllmRequestCost(reqs, capacityBlocks, sc)
	if prefill+decode <= 0 {
		return 0
	}
	return prefill / (prefill + decode)
}

// vllmRequestCost returns a mean request's prefill and decode seconds (see
// VLLMTokenCost) and its mean prompt tokens; zeros for no requests.
func vllmRequestCost(reqs []trace.Request, capacityBlocks int, sc engine.SchedConfig) (prefill, decode, p float64) {
	if len(reqs) == 0 || capacityBlocks <= 0 {
		return 0, 0, 0
	}
	if sc.BlockSize == 0 {
		sc.BlockSize = 16
	}
	if sc.MaxNumSeqs == 0 {
		sc.MaxNumSeqs = engine.DefaultMaxNumSeqs
	}
	if sc.Step == (engine.StepModel{}) {
		sc.Step = engine.Llama31H100
	}
	var in, out float64
	for _, r := range reqs {
		in += float64(r.InputLength)
		out += float64(max(r.OutputLength, 1))
	}
	p, o := in/float64(len(reqs)), out/float64(len(reqs))
	if p <= 0 {
		return 0, 0, 0
	}
	held := p + o/2
	b := min(float64(sc.MaxNumSeqs), max(1, float64(capacityBlocks*sc.BlockSize)/held))
	m := sc.Step
	step := m.Base.Seconds() + b*(m.PerDecodeSeq.Seconds()+held*m.PerKVTokenNs*1e-9)
	return p * m.PerPrefillToken.Seconds(), o * step / b, p
}
