package scoring

import "math"

// choose picks an index into costs: the minimum (random among ties) at
// temperature 0, otherwise a softmax sample over costs normalized to [0, 1].
// With loads set, only the indices whose load is at most bound are chosen
// from (the bounded-load guard's admitted candidates, balance.go); at least
// one must be.
func (r *Router) choose(costs []float64, temperature float64, loads []float64, bound float64) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	out := func(i int) bool { return loads != nil && loads[i] > bound }
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, c := range costs {
		if !out(i) {
			lo, hi = min(lo, c), max(hi, c)
		}
	}
	if temperature == 0 || hi == lo {
		ties := 0
		pick := 0
		for i, c := range costs {
			if c == lo && !out(i) {
				ties++
				if r.rng.IntN(ties) == 0 { // reservoir sample among ties
					pick = i
				}
			}
		}
		return pick
	}
	total := 0.0
	for i, c := range costs {
		if !out(i) {
			total += math.Exp(-((c - lo) / (hi - lo)) / temperature)
		}
	}
	x := r.rng.Float64() * total
	last := 0
	for i, c := range costs {
		if out(i) {
			continue
		}
		last = i
		x -= math.Exp(-((c - lo) / (hi - lo)) / temperature)
		if x <= 0 {
			return i
		}
	}
	return last
}
