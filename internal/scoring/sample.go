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
	// One pass finds lo and hi, and the ties at lo as they stand: without a
	// NaN, a cost below the running lo is the new minimum and one equal to it
	// a tie. Comparisons find the lo and hi min and max would, except perhaps
	// for the sign of a zero, which changes nothing below (a tie compares
	// equal, hi - lo is hi or -lo, and exp(±0) is 1). min and max propagate a
	// NaN, so after one they are taken again with min and max.
	lo, hi := math.Inf(1), math.Inf(-1)
	ties, first, nan := 0, 0, false
	for i, c := range costs {
		if out(i) {
			continue
		}
		switch {
		case c < lo:
			lo, ties, first = c, 1, i
		case c == lo: // (+Inf as the first: lo starts there)
			if ties == 0 {
				first = i
			}
			ties++
		case c != c:
			nan = true
		}
		if c > hi {
			hi = c
		}
	}
	if nan {
		lo, hi = math.Inf(1), math.Inf(-1)
		for i, c := range costs {
			if !out(i) {
				lo, hi = min(lo, c), max(hi, c)
			}
		}
	}
	if temperature == 0 || hi == lo {
		if ties == 1 && !nan {
			// The reservoir sample below with one tie: its one draw, the
			// same rng state after.
			r.rng.IntN(1)
			return first
		}
		// (No tie comes before first, the first index at the final lo.)
		ties = 0
		pick := 0
		for i := first; i < len(costs); i++ {
			if c := costs[i]; c == lo && !out(i) {
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
