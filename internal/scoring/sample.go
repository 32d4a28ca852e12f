package scoring

import "math"

// choose picks an index into costs: the minimum (random among ties) at
// temperature 0, otherwise a softmax sample over costs normalized to [0, 1].
func (r *Router) choose(costs []float64, temperature float64) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range costs {
		lo, hi = min(lo, c), max(hi, c)
	}
	if temperature == 0 || hi == lo {
		ties := 0
		pick := 0
		for i, c := range costs {
			if c == lo {
				ties++
				if r.rng.IntN(ties) == 0 { // reservoir sample among ties
					pick = i
				}
			}
		}
		return pick
	}
	total := 0.0
	for _, c := range costs {
		total += math.Exp(-((c - lo) / (hi - lo)) / temperature)
	}
	x := r.rng.Float64() * total
	for i, c := range costs {
		x -= math.Exp(-((c - lo) / (hi - lo)) / temperature)
		if x <= 0 {
			return i
		}
	}
	return len(costs) - 1
}
