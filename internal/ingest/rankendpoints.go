package ingest

import (
	"errors"
	"fmt"
)

// ErrRankEndpoints: a worker's per-rank endpoint lists do not give one
// endpoint per rank.
var ErrRankEndpoints = errors.New("per-rank endpoints")

// checkRankEndpoints checks w's endpoints (DPSize already defaulted): an
// explicit list has one entry per rank, and every rank has a KV events
// endpoint.
func (w *Worker) checkRankEndpoints() error {
	if n := len(w.RankKVEndpoints); n > 0 && n != w.DPSize {
		return fmt.Errorf("%w: %d KV events endpoints for dp size %d", ErrRankEndpoints, n, w.DPSize)
	}
	if n := len(w.RankReplayEndpoints); n > 0 && n != w.DPSize {
		return fmt.Errorf("%w: %d replay endpoints for dp size %d", ErrRankEndpoints, n, w.DPSize)
	}
	if len(w.RankKVEndpoints) == 0 && w.KVEndpoint == "" {
		return errors.New("no KV events endpoint")
	}
	for dp, ep := range w.RankKVEndpoints {
		if ep == "" {
			return fmt.Errorf("%w: rank %d has no KV events endpoint", ErrRankEndpoints, dp)
		}
	}
	return nil
}

// kvEndpoint is rank dp's KV events endpoint: its own, or the rank 0
// endpoint's port + dp (vLLM's data-parallel layout on one host).
func (w *Worker) kvEndpoint(dp int) (string, error) {
	if len(w.RankKVEndpoints) > 0 {
		return w.RankKVEndpoints[dp], nil
	}
	return RankEndpoint(w.KVEndpoint, dp)
}

// replayEndpoint is rank dp's replay endpoint ("" if it has none): its own,
// or the rank 0 endpoint's port + dp.
func (w *Worker) replayEndpoint(dp int) (string, error) {
	switch {
	case len(w.RankReplayEndpoints) > 0:
		return w.RankReplayEndpoints[dp], nil
	case w.ReplayEndpoint == "":
		return "", nil
	}
	return RankEndpoint(w.ReplayEndpoint, dp)
}
