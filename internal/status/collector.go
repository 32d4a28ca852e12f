package status

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports each rank's cached blocks from a Source at scrape time:
// the router's side of the dashboard's comparison with what the engines
// report holding.
type Collector struct {
	src    Source
	cached *prometheus.Desc
}

// NewCollector returns a Collector over src.
func NewCollector(src Source) *Collector {
	l := []string{"worker", "dp_rank"}
	return &Collector{
		src: src,
		cached: prometheus.NewDesc("kvrouter_rank_cached_blocks",
			"Blocks the index holds for a worker/rank.", l, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.cached
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.src.Ranks() {
		rank := strconv.FormatUint(uint64(r.DPRank), 10)
		ch <- prometheus.MustNewConstMetric(c.cached, prometheus.GaugeValue, float64(r.CachedBlocks), r.Worker, rank)
	}
}
