package stats

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	s := make([]time.Duration, 0, 1000)
	for i := 1000; i >= 1; i-- {
		s = append(s, time.Duration(i))
	}
	sum := Summarize(s)
	want := Summary{N: 1000, Mean: 500, P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000}
	if sum != want {
		t.Fatalf("got %+v want %+v", sum, want)
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{[]time.Duration{7}, 99, 7},
		{[]time.Duration{1, 2}, 50, 1},
		{[]time.Duration{1, 2}, 51, 2},
		{[]time.Duration{1, 2, 3, 4}, 0, 1},
	} {
		if got := Percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("Percentile(%v, %v) = %v want %v", tc.in, tc.p, got, tc.want)
		}
	}
	if (Summarize(nil) != Summary{}) {
		t.Error("empty summary")
	}
}

func TestImbalance(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{1, 1, 1, 1}, 1},
		{[]float64{4, 0, 0, 0}, 4},
		{[]float64{3, 1}, 1.5},
		{[]float64{0, 0}, 0},
		{nil, 0},
	} {
		if got := Imbalance(tc.in); got != tc.want {
			t.Errorf("Imbalance(%v) = %v want %v", tc.in, got, tc.want)
		}
	}
}
