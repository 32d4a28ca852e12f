package status

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports each rank's cached blocks, and its capacity where
// known, from a Source at scrape time: the router's side of the dashboard's
// comparison with what the engines report holding.
type Collector struct {
	src              Source
	cached, capacity *prometheus.Desc
}

// NewCollector returns a Collector over src.
func NewCollector(src Source) *Collector {
	l := []string{"worker", "dp_rank"}
	return &Collector{
		src: src,
		cached: prometheus.NewDesc("kvrouter_rank_cached_blocks",
			"Blocks the index holds for a worker/rank.", l, nil),
		capacity: prometheus.NewDesc("kvrouter_rank_capacity_blocks",
			"The bound on what a worker/rank can hold, in router blocks (reported once known).", l, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.cached
	ch <- c.capacity
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.src.Ranks() {
		rank := strconv.FormatUint(uint64(r.DPRank), 10)
		ch <- prometheus.MustNewConstMetric(c.cached, prometheus.GaugeValue, float64(r.CachedBlocks), r.Worker, rank)
		if r.CapacityBlocks > 0 {
			ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(r.CapacityBlocks), r.Worker, rank)
		}
	}
}
