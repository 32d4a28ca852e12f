package replay

import (
	"errors"
	"slices"
	"testing"
)

// TestAnsweredOrder: a burst whose choices all came from a router is handed
// out in the order they were answered; one with a choice that consulted no
// router, or failed, keeps the trace's order.
func TestAnsweredOrder(t *testing.T) {
	burst := func(routed []bool, answered []int64, failed int) []*pending {
		var b []*pending
		for i := range routed {
			pd := &pending{seq: i, c: Choice{Routed: routed[i]}, answered: answered[i]}
			if i == failed {
				pd.err = errors.New("no answer")
			}
			b = append(b, pd)
		}
		return b
	}
	seqs := func(b []*pending) []int {
		var out []int
		for _, pd := range b {
			out = append(out, pd.seq)
		}
		return out
	}
	for _, c := range []struct {
		name     string
		routed   []bool
		answered []int64
		failed   int
		want     []int
	}{
		{"routed", []bool{true, true, true}, []int64{7, 5, 6}, -1, []int{1, 2, 0}},
		{"in order already", []bool{true, true}, []int64{3, 4}, -1, []int{0, 1}},
		{"one not routed", []bool{true, false, true}, []int64{7, 5, 6}, -1, []int{0, 1, 2}},
		{"one failed", []bool{true, true, true}, []int64{7, 5, 6}, 2, []int{0, 1, 2}},
	} {
		b := burst(c.routed, c.answered, c.failed)
		answeredOrder(b)
		if got := seqs(b); !slices.Equal(got, c.want) {
			t.Errorf("%s: handed %v, want %v", c.name, got, c.want)
		}
	}
}
