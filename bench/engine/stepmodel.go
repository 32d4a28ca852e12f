package engine

import "time"

// StepModel is the simulated duration of one engine step (one forward pass
// over the batch the scheduler formed):
//
//	Base + PerPrefillToken x prefill tokens + PerDecodeSeq x decoding requests
//	     + PerKVToken x KV tokens read (the context of every scheduled request)
//
// so a step slows as more requests share it and as their contexts grow.
// docs/engine-model.md gives the source of the defaults.
type StepModel struct {
	Base            time.Duration
	PerPrefillToken time.Duration
	PerDecodeSeq    time.Duration
	// PerKVTokenNs is in nanoseconds as a float: it is below a nanosecond's
	// resolution for small models.
	PerKVTokenNs float64
}

// Llama31H100 is Llama-3.1-8B-Instruct (bf16, TP 1) on one H100 SXM: the
// first three terms are the BLIS (llm-d inference-sim) fitted beta
// coefficients for that model and GPU; the KV term is the bytes of KV one
// token holds over the GPU's memory bandwidth.
var Llama31H100 = StepModel{
	Base:            5752705 * time.Nanosecond,
	PerPrefillToken: 17251 * time.Nanosecond,
	PerDecodeSeq:    5999 * time.Nanosecond,
	PerKVTokenNs:    39.1,
}

// Duration is the time of a step with the given batch.
func (m StepModel) Duration(prefillTokens, decodeSeqs, kvTokens int) time.Duration {
	return m.Base + time.Duration(prefillTokens)*m.PerPrefillToken +
		time.Duration(decodeSeqs)*m.PerDecodeSeq +
		time.Duration(m.PerKVTokenNs*float64(kvTokens))
}
