// Package stats summarizes latency samples.
package stats

import (
	"math"
	"sort"
	"time"
)

// Summary describes a set of durations.
type Summary struct {
	N    int           `json:"n"`
	Mean time.Duration `json:"mean_ns"`
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
}

// Summarize sorts samples in place and summarizes them.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	var sum float64
	for _, s := range samples {
		sum += float64(s)
	}
	return Summary{
		N:    len(samples),
		Mean: time.Duration(sum / float64(len(samples))),
		P50:  Percentile(samples, 50),
		P90:  Percentile(samples, 90),
		P99:  Percentile(samples, 99),
		P999: Percentile(samples, 99.9),
		Max:  samples[len(samples)-1],
	}
}

// Percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted
// samples: the smallest sample with at least p% of samples at or below it.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p/100*float64(len(sorted)) - 1e-9)) // tolerate float error
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Imbalance is max/mean of loads; 1 is perfectly even, 0 for no load.
func Imbalance(loads []float64) float64 {
	var sum, mx float64
	for _, l := range loads {
		sum += l
		mx = max(mx, l)
	}
	if sum == 0 {
		return 0
	}
	return mx / (sum / float64(len(loads)))
}
