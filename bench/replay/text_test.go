package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"context"
	"errors"
	"testing"

	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// TestCompareTextRefusals: text comparisons that could not send text end to end are refused
// before anything starts.
func TestCompareTextRefusals(t *testing.T) {
	text := func(int) string { return " hello" }
	tok := &tokenizer.Tokenizer{}
	for name, cfg := range map[string]CompareConfig{
		"no tokenizer": {Text: text},
		"replicas":     {Text: text, Tokenizer: tok, Replicas: []int{2}},
		"epp":          {Text: text, Tokenizer: tok, Router: harness.RouterConfig{EPP: true}},
		"epp policy":   {Text: text, Tokenizer: tok, Policies: []string{PolicyKV, PolicyKVEPP}},
	} {
		cfg.Engines, cfg.Capacity, cfg.SpeedUp = 1, 1, 1
		if _, err := Compare(context.Background(), cfg); !errors.Is(err, ErrTextMode) {
			t.Errorf("%s: got %v, want ErrTextMode", name, err)
		}
	}
}
