package replay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// RequestRecord is one request's path through a vLLM-model engine: where
// it ran and when its first step began and its first token came, and the
// tokens its steps computed before that (its prompt less what it found
// cached, plus any it computed again after a preemption). A TTFT tail read
// from these records says which requests waited and which prefilled what
// another engine or an earlier request had already computed.
type RequestRecord struct {
	// Seq is the request's index in the replayed trace.
	Seq    int `json:"seq"`
	Engine int `json:"engine"`
	// Arrival, Scheduled and First are simulated times from the replay's start.
	Arrival   time.Duration `json:"arrival_ns"`
	Scheduled time.Duration `json:"scheduled_ns"`
	First     time.Duration `json:"first_token_ns"`
	// PromptTokens is 0 for a text prompt, which the engine tokenizes.
	PromptTokens int `json:"prompt_tokens"`
	Prefilled    int `json:"prefilled_tokens"`
}

// writeRecords writes recs to path as JSON lines.
func writeRecords(path string, recs []RequestRecord) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			f.Close()
			return fmt.Errorf("request records %s: %w", path, err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("request records %s: %w", path, err)
	}
	return f.Close()
}
