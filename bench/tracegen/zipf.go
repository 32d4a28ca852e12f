package tracegen

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Zipf draws ranks 0..n-1 with P(k) proportional to 1/(k+1)^s. Unlike
// math/rand's Zipf it takes any exponent s >= 0 (0 is uniform); popularity
// skews of real prompt and document reuse are often near or below 1.
type Zipf struct {
	cdf []float64
}

// NewZipf builds the distribution over n >= 1 ranks.
func NewZipf(n int, s float64) *Zipf {
	z := &Zipf{cdf: make([]float64, n)}
	sum := 0.0
	for k := range n {
		sum += math.Pow(float64(k+1), -s)
		z.cdf[k] = sum
	}
	for k := range z.cdf {
		z.cdf[k] /= sum
	}
	return z
}

// N is the number of ranks.
func (z *Zipf) N() int { return len(z.cdf) }

// P is the probability of rank k.
func (z *Zipf) P(k int) float64 {
	if k == 0 {
		return z.cdf[0]
	}
	return z.cdf[k] - z.cdf[k-1]
}

// Sample draws a rank.
func (z *Zipf) Sample(r *rand.Rand) int {
	u := r.Float64()
	k := sort.SearchFloat64s(z.cdf, u)
	// u < 1 = cdf[n-1] up to rounding; clamp for the rounding.
	return min(k, len(z.cdf)-1)
}
