package ingest

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// rankCollector exports the counters a rank's status keeps (one set of
// counters: RankStatus and /metrics read the same atomics) at scrape time,
// for every rank the Manager follows. A removed worker's series go with it.
type rankCollector struct {
	m     *Manager
	descs [numRankSeries]*prometheus.Desc
}

// The rank series the collector exports.
const (
	seriesGaps = iota
	seriesReplays
	seriesReplayFailures
	seriesRestarts
	seriesReconnects
	seriesCatchUpsLimited
	seriesBudgetWaits
	seriesEvictions
	seriesLastSeq
	seriesConnected
	seriesInexact
	seriesCapacity
	numRankSeries
)

var rankSeries = [numRankSeries]struct {
	name, help string
	gauge      bool
}{
	seriesGaps:            {"gaps_total", "Sequence gaps seen on the live stream.", false},
	seriesReplays:         {"replays_total", "Replay requests sent to the engine.", false},
	seriesReplayFailures:  {"replay_failures_total", "Gaps replay could not cover (the rank kept its blocks, inexact) and failed replay requests.", false},
	seriesRestarts:        {"engine_restarts_total", "Engine restarts detected (seq went backwards); the rank was cleared.", false},
	seriesReconnects:      {"reconnects_total", "Connections re-established after the first.", false},
	seriesCatchUpsLimited: {"catch_ups_limited_total", "Connections that did not catch up from seq 0 (one did less than the catch-up interval ago).", false},
	seriesBudgetWaits:     {"queue_budget_waits_total", "Batches whose reader waited for the shared queue budget (reading nothing meanwhile).", false},
	seriesEvictions:       {"capacity_evictions_total", "Blocks an inexact rank stopped claiming because it claimed more than its capacity (oldest first).", false},
	seriesLastSeq:         {"last_seq", "Last sequence number applied.", true},
	seriesConnected:       {"connected", "Live connections to the engine's publisher.", true},
	seriesInexact: {"inexact", "1 while the rank's index may differ from the engine's cache: history was lost and the " +
		"blocks were kept (0 after a clear).", true},
	seriesCapacity: {"capacity_blocks", "The bound on what an inexact rank claims, in router blocks " +
		"(registered, or learned while exact; 0 while not known).", true},
}

func newRankCollector(m *Manager) *rankCollector {
	c := &rankCollector{m: m}
	for i, s := range rankSeries {
		c.descs[i] = prometheus.NewDesc("kvrouter_ingest_"+s.name, s.help, []string{"worker", "dp_rank"}, nil)
	}
	return c
}

func (c *rankCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *rankCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	var ranks []*rank
	for _, w := range c.m.workers {
		ranks = append(ranks, w.ranks...)
	}
	c.m.mu.Unlock()
	for _, r := range ranks {
		dp := strconv.FormatUint(uint64(r.dp), 10)
		v := [numRankSeries]uint64{
			seriesGaps: r.gaps.Load(), seriesReplays: r.replays.Load(), seriesReplayFailures: r.replayFailures.Load(),
			seriesRestarts: r.restarts.Load(), seriesReconnects: r.reconnects.Load(),
			seriesCatchUpsLimited: r.limited.Load(), seriesBudgetWaits: r.budgetWaits.Load(),
			seriesEvictions: r.evictions.Load(), seriesLastSeq: r.lastSeq.Load(),
			seriesConnected: uint64(max(r.conns.Load(), 0)), seriesCapacity: r.capBlocks.Load(),
		}
		if r.inexact.Load() {
			v[seriesInexact] = 1
		}
		for i, d := range c.descs {
			t := prometheus.CounterValue
			if rankSeries[i].gauge {
				t = prometheus.GaugeValue
			}
			ch <- prometheus.MustNewConstMetric(d, t, float64(v[i]), r.worker, dp)
		}
	}
}
