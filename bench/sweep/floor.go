package sweep

import (
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/trace"
)

// TTFTFloor returns, per request, a time to first token that no routing
// can beat on the vLLM engine model: the request's prefill on an engine of
// its own (no decode batch, no queue), of the prompt tokens that no earlier
// request could have computed by its arrival. It is optimistic everywhere a
// router could be lucky: every engine's cache is unbounded and visible to
// every request, each earlier request is taken to have run alone from its own
// arrival, and the blocks of a prompt count as computed at the end of the
// step (chunk) that computed them, before the request's first token.
//
// The p99 of the floor is what decides whether a TTFT p99 target is within
// reach: a target below it is out of reach for any router, and one close to
// it leaves no room for queueing or the decode batch that shares the steps.
func TTFTFloor(reqs []trace.Request, sc engine.SchedConfig) []time.Duration {
	budget := sc.MaxNumBatchedTokens
	if budget <= 0 {
		budget = engine.DefaultMaxNumBatchedTokens
	}
	step := sc.Step
	if step == (engine.StepModel{}) {
		step = engine.Llama31H100
	}
	// ready maps a prefix (the chain of a prompt's hash ids up to one) to
	// the earliest time any request had computed it.
	ready := make(map[uint64]time.Duration)
	out := make([]time.Duration, len(reqs))
	var keys []uint64
	for i, r := range reqs {
		keys = prefixKeys(r.HashIDs, keys[:0])
		bt := r.IDBlockTokens()
		have := 0 // leading id blocks computed by r's arrival
		for have < len(keys) {
			at, ok := ready[keys[have]]
			if !ok || at > r.Arrival {
				break
			}
			have++
		}
		cached := min(have*bt, max(r.InputLength-1, 0))
		var d time.Duration
		for done := cached; done < r.InputLength; {
			chunk := min(budget, r.InputLength-done)
			done += chunk
			d += step.Duration(chunk, 0, done)
			// the id blocks this chunk completed are computed at r.Arrival+d
			for k := have; k < len(keys) && (k+1)*bt <= done; k++ {
				noteReady(ready, keys[k], r.Arrival+d)
				have = k + 1
			}
		}
		for k := have; k < len(keys); k++ { // a last, partial id block
			noteReady(ready, keys[k], r.Arrival+d)
		}
		out[i] = d
	}
	return out
}

// prefixKeys appends the chain key of each leading run of ids.
func prefixKeys(ids []uint64, out []uint64) []uint64 {
	var buf [16]byte
	var h uint64
	for _, id := range ids {
		for b := range 8 {
			buf[b], buf[8+b] = byte(h>>(8*b)), byte(id>>(8*b))
		}
		h = xxhash.Sum64(buf[:])
		out = append(out, h)
	}
	return out
}

func noteReady(ready map[uint64]time.Duration, key uint64, at time.Duration) {
	if old, ok := ready[key]; !ok || at < old {
		ready[key] = at
	}
}
