package replay

import (
	"testing"
	"time"
)

func TestBurstCounter(t *testing.T) {
	for _, tc := range []struct {
		name            string
		at              []time.Duration
		engine          []int
		requests, piled int
	}{
		{name: "no bursts", at: []time.Duration{0, 1, 2}, engine: []int{0, 0, 0}},
		{name: "spread burst", at: []time.Duration{5, 5, 5}, engine: []int{0, 1, 2}, requests: 3},
		{name: "piled burst", at: []time.Duration{5, 5, 5}, engine: []int{1, 1, 1}, requests: 3, piled: 2},
		{name: "pile counted once per request", at: []time.Duration{5, 5, 5, 5}, engine: []int{1, 2, 1, 2}, requests: 4, piled: 2},
		{name: "bursts apart", at: []time.Duration{5, 5, 6, 6, 7}, engine: []int{3, 3, 3, 4, 3}, requests: 4, piled: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b burstCounter
			for i := range tc.at {
				b.add(tc.at[i], tc.engine[i])
			}
			if b.Requests != tc.requests || b.Piled != tc.piled {
				t.Errorf("requests %d piled %d, want %d %d", b.Requests, b.Piled, tc.requests, tc.piled)
			}
		})
	}
}
