package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/radix"
)

// indexCollector reports the index's own counters and size at scrape time.
type indexCollector struct {
	index *radix.Index
	descs [10]*prometheus.Desc
}

func newIndexCollector(ix *radix.Index) *indexCollector {
	c := &indexCollector{index: ix}
	for i, d := range [...][2]string{
		{"kvrouter_index_stores_total", "Store runs applied to the index."},
		{"kvrouter_index_removes_total", "Remove calls applied to the index."},
		{"kvrouter_index_blocks_stored_total", "Blocks of applied stores (all workers)."},
		{"kvrouter_index_blocks_removed_total", "Tier copies removed (all workers)."},
		{"kvrouter_index_parent_not_found_total", "Stores dropped because their parent was unknown."},
		{"kvrouter_index_invalid_total", "Stores dropped as invalid (repeated hash or own parent)."},
		{"kvrouter_index_block_not_found_total", "Unknown engine hashes in removes and tier stores."},
		{"kvrouter_index_duplicate_store_total", "Stores of a copy the worker already held."},
		{"kvrouter_index_nodes", "Live radix tree nodes."},
		{"kvrouter_index_residencies", "Cached (block, worker/rank) pairs in the index."},
	} {
		c.descs[i] = prometheus.NewDesc(d[0], d[1], nil, nil)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *indexCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *indexCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.index.Stats()
	vals := [...]uint64{st.Stores, st.Removes, st.BlocksStored, st.BlocksRemoved, st.ParentNotFound,
		st.Invalid, st.BlockNotFound, st.DuplicateStore, st.Nodes, st.Residencies}
	for i, v := range vals {
		kind := prometheus.CounterValue
		if i >= 8 {
			kind = prometheus.GaugeValue
		}
		ch <- prometheus.MustNewConstMetric(c.descs[i], kind, float64(v))
	}
}
