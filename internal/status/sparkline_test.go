package status

import (
	"math"
	"testing"
)

func TestSparkPath(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		vs   []float64
		want string
	}{
		{nil, ""},
		{[]float64{nan, nan}, ""},
		{[]float64{0, 0.5, 1}, "M0.0,100.0L50.0,50.0L100.0,0.0"},
		// Out of range values are clamped; a NaN breaks the line.
		{[]float64{-1, 2, nan, 0.25, 0.75}, "M0.0,100.0L25.0,0.0 M75.0,75.0L100.0,25.0"},
		// A point alone gets a tick, cut at the right edge.
		{[]float64{nan, 0.5, nan, nan, 1}, "M25.0,50.0h2.0 M100.0,0.0h0.0"},
		{[]float64{0.5}, "M0.0,50.0h2.0"},
	} {
		if got := sparkPath(tc.vs, 100, 100); got != tc.want {
			t.Errorf("sparkPath(%v) = %q, want %q", tc.vs, got, tc.want)
		}
	}
}
