package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
)

// TextRouterChooser is RouterChooser for text prompts: Route gets Prompt.text (text(seq)), or
// with body Prompt.openai_body, which the router tokenizes with the model's tokenizer (started
// with --model NAME=DIR).
func TextRouterChooser(rc kvrouterv1.RouterClient, f *harness.Fleet, model string, text func(seq int) string, body bool) ChooseFunc {
	return func(ctx context.Context, seq int, _ []uint32, id string) (Choice, error) {
		p := &kvrouterv1.Prompt{Model: model}
		if body {
			p.OpenaiBody = []byte(text(seq))
		} else {
			p.Text = text(seq)
		}
		req := &kvrouterv1.RouteRequest{Prompt: p, RequestId: id, MaxCandidates: 1}
		t0 := time.Now()
		resp, err := rc.Route(ctx, req)
		lat := time.Since(t0)
		if err != nil {
			return Choice{}, fmt.Errorf("route text: %w", err)
		}
		return routeChoice(f, resp, lat)
	}
}

// tokenizeJob has the chosen engine tokenize a text job. A failure drops the request, counted.
func tokenizeJob(j *job, body bool, e *engine.Engine, dropped *atomic.Int64, note func(error)) bool {
	tokenize := e.Tokenize
	if body {
		tokenize = func(b string) ([]uint32, error) { return e.TokenizeBody([]byte(b)) }
	}
	toks, err := tokenize(j.text)
	if err != nil {
		dropped.Add(1)
		note(fmt.Errorf("request %s: %w", j.id, err))
		return false
	}
	j.tokens = toks
	return true
}

// ErrTextMode is returned for a text comparison the text path does not support.
var ErrTextMode = errors.New("text prompts")

// checkText refuses text comparisons that would not send text end to end.
func (cfg *CompareConfig) checkText() error {
	switch {
	case cfg.Text == nil:
		return nil
	case cfg.Tokenizer == nil:
		return fmt.Errorf("compare: %w need the engines' tokenizer", ErrTextMode)
	case len(cfg.Replicas) > 0:
		return fmt.Errorf("compare: %w go to one router called directly, not through replicas", ErrTextMode)
	case cfg.Router.EPP:
		return fmt.Errorf("compare: %w are not sent through the endpoint picker", ErrTextMode)
	}
	for _, p := range cfg.Policies {
		if isRouterPolicy(p) && p != PolicyKV && p != PolicyKVNoPredict {
			return fmt.Errorf("compare: %w go to the router directly, not policy %s", ErrTextMode, p)
		}
	}
	return nil
}

// TokenizationCheck is what the router's drift check counted in a text run: requests whose
// blocks, as the router tokenized them, the engine then stored (confirmed) or did not.
type TokenizationCheck struct {
	Confirmed  float64 `json:"confirmed"`
	Mismatched float64 `json:"mismatched"`
	Unchecked  float64 `json:"unchecked"`
	Error      string  `json:"error,omitempty"`
}

// tokenizationCheck reads the router's kvrouter_tokenization_* counters.
func tokenizationCheck(r *harness.Router) *TokenizationCheck {
	var tc TokenizationCheck
	for name, dst := range map[string]*float64{
		"kvrouter_tokenization_confirmed_total":  &tc.Confirmed,
		"kvrouter_tokenization_mismatched_total": &tc.Mismatched,
		"kvrouter_tokenization_unchecked_total":  &tc.Unchecked,
	} {
		v, err := r.MetricSum(name)
		if err != nil {
			tc.Error = err.Error()
			break
		}
		*dst = v
	}
	return &tc
}
