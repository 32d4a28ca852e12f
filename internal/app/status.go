package app

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
	"github.com/kvrouter/kvrouter/internal/status"
)

// statusModule serves the status page at /status on the HTTP listener,
// beside /metrics and under the same access, and feeds its decision log
// from the route path. It also exports the per-rank cached blocks the page
// shows (kvrouter_rank_cached_blocks).
func statusModule(a *App) error {
	if err := a.Metrics().Register(status.NewCollector(workerSource{srv: a.Server()})); err != nil {
		return err
	}
	p := &statusPage{decisions: status.NewDecisionLog(status.LogConfig{})}
	a.Mux().Handle("/status", status.NewHandler(status.PageConfig{
		Source: workerSource{srv: a.Server(), gather: a.Metrics()}, Log: p.decisions,
		Refresh: 5 * time.Second, Logger: a.Logger(),
	}))
	a.Server().SetDecisionHook(p.decision)
	return nil
}

// statusPage holds the page's decision log.
type statusPage struct {
	decisions *status.DecisionLog
}

// decision is the route path's hook: it copies d into the page's log.
func (p *statusPage) decision(model, requestID string, d *scoring.Decision) {
	sd := status.Decision{
		Model: model, RequestID: requestID, WorkerID: d.WorkerID, DPRank: d.DPRank,
		Reason: d.Reason, Matched: d.Matched, PromptBlocks: d.PromptBlocks, RandomMatched: d.RandomMatched, Cost: d.Cost,
	}
	var cands [8]status.Candidate
	n := 0
	for _, c := range d.Candidates {
		if n == len(cands) {
			sd.OmittedCandidates++
			continue
		}
		cands[n] = status.Candidate{WorkerID: c.WorkerID, DPRank: c.DPRank, Matched: c.Matched,
			PrefillBlocks: c.PrefillBlocks, DecodeBlocks: c.DecodeBlocks, Cost: c.Cost}
		n++
	}
	p.decisions.Add(&sd, cands[:n])
}

// workerSource lists the server's workers and ranks for the page, a
// ListWorkers page at a time, with each rank's event lag from gather when
// set (not for the collector: a collector must not gather its own
// registry).
type workerSource struct {
	srv    *server.Server
	gather prometheus.Gatherer
}

func (s workerSource) Ranks() []status.Rank {
	if !s.srv.Ready() {
		return nil // the index is not restored yet: no workers to list
	}
	lags := s.lags()
	var out []status.Rank
	req := &kvrouterv1.ListWorkersRequest{}
	for {
		resp, err := s.srv.ListWorkers(context.Background(), req)
		if err != nil {
			return out
		}
		for _, ws := range resp.GetWorkers() {
			w := ws.GetWorker()
			r := status.Rank{
				Worker: w.GetWorkerId(), Model: w.GetModel(), DPRank: ws.GetDpRank(), Connected: ws.GetConnected(),
				LastSeq: ws.GetLastSeq(), LagSeconds: -1, CachedBlocks: ws.GetCachedBlocks(),
				CapacityBlocks: ws.GetCapacityBlocks(), Inexact: ws.GetInexact(), InexactSinceSeq: ws.GetInexactSinceSeq(),
				Restore: ws.GetRestore(),
			}
			if l, ok := lags[rankKey{r.Worker, strconv.FormatUint(uint64(r.DPRank), 10)}]; ok {
				r.LagSeconds = l
			}
			for _, p := range ws.GetProblems() {
				r.Problems = append(r.Problems, status.Problem{Reason: p.GetReason(), Count: p.GetCount(), Detail: p.GetDetail()})
			}
			out = append(out, r)
		}
		if resp.GetNextPageToken() == "" {
			return out
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

type rankKey struct{ worker, rank string }

// lags reads kvrouter_ingest_event_lag_seconds by worker and rank.
func (s workerSource) lags() map[rankKey]float64 {
	if s.gather == nil {
		return nil
	}
	mfs, err := s.gather.Gather()
	if err != nil {
		return nil
	}
	out := map[rankKey]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kvrouter_ingest_event_lag_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var k rankKey
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "worker":
					k.worker = l.GetValue()
				case "dp_rank":
					k.rank = l.GetValue()
				}
			}
			out[k] = m.GetGauge().GetValue()
		}
	}
	return out
}
