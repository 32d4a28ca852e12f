package replay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/stats"
)

// SyncLag is how long a Route's state change on one replica takes to show on
// another, probed from outside over gRPC.
type SyncLag struct {
	// Lag runs from the end of the Route on one replica to the end of the
	// first Score on the other that shows the routed prompt's blocks as
	// predicted on the chosen worker; Resolution is the mean Score latency,
	// the probe's granularity.
	Lag        stats.Summary `json:"lag"`
	Resolution time.Duration `json:"resolution_ns"`
	// Unseen are probes the other replica had not applied within the timeout.
	Unseen int `json:"unseen"`
}

// MeasureSyncLag routes n fresh prompts (blocks no engine holds) on from
// with a request id, polls Score on to until it reports them predicted on the
// worker from chose, then finishes the request on from. The routers must
// predict (the default).
func MeasureSyncLag(ctx context.Context, from, to kvrouterv1.RouterClient, model string, n, blocks int, seed uint64) (*SyncLag, error) {
	const timeout = 2 * time.Second
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	res := &SyncLag{}
	var lags []time.Duration
	var scoreTime time.Duration
	scores := 0
	for i := 0; i < n; i++ {
		tokens := make([]uint32, blocks*16)
		for j := range tokens {
			tokens[j] = 200000 + rng.Uint32N(1<<30) // outside any trace's token ids
		}
		prompt := &kvrouterv1.Prompt{Model: model, TokenIds: tokens}
		id := fmt.Sprintf("sync-lag-%d-%d", seed, i)
		resp, err := from.Route(ctx, &kvrouterv1.RouteRequest{Prompt: prompt, RequestId: id, MaxCandidates: 1})
		if err != nil {
			return nil, fmt.Errorf("sync lag: route: %w", err)
		}
		t0 := time.Now()
		seen := false
		for time.Since(t0) < timeout && !seen {
			s0 := time.Now()
			sr, err := to.Score(ctx, &kvrouterv1.ScoreRequest{Prompt: prompt})
			scoreTime += time.Since(s0)
			scores++
			if err != nil {
				return nil, fmt.Errorf("sync lag: score: %w", err)
			}
			for _, w := range sr.Scores {
				if w.WorkerId == resp.WorkerId && w.DpRank == resp.DpRank && w.PredictedBlocks > 0 {
					seen = true
				}
			}
		}
		if seen {
			lags = append(lags, time.Since(t0))
		} else {
			res.Unseen++
		}
		if _, err := from.MarkFinished(ctx, &kvrouterv1.RequestRef{RequestId: id}); err != nil {
			return nil, fmt.Errorf("sync lag: finish: %w", err)
		}
	}
	res.Lag = stats.Summarize(lags)
	if scores > 0 {
		res.Resolution = scoreTime / time.Duration(scores)
	}
	return res, nil
}
