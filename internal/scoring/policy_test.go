package scoring

import (
	"math"
	"testing"
)

// TestNotFiniteTest checks timeCoster's one-test replacement of
// math.IsNaN || math.IsInf.
func TestNotFiniteTest(t *testing.T) {
	for _, x := range []float64{0, math.Copysign(0, -1), 1, -1, math.SmallestNonzeroFloat64, math.MaxFloat64, -math.MaxFloat64, math.Inf(1), math.Inf(-1), math.NaN()} {
		if got, want := x-x != 0, math.IsNaN(x) || math.IsInf(x, 0); got != want {
			t.Errorf("%v: x-x != 0 is %v, IsNaN || IsInf %v", x, got, want)
		}
	}
}
