package scoring

import (
	"math"
	"testing"
)

// TestDecayMemoIsRankDecay checks the memo returns rankDecay's value bit for
// bit: computed, remembered, past the memo's end, for another rank count,
// and without a memo.
func TestDecayMemoIsRankDecay(t *testing.T) {
	var m *decayMemo
	for _, ranks := range []int{0, 1, 8, 1000} {
		m = m.memoFor(ranks)
		if m.memoFor(ranks) != m {
			t.Fatalf("ranks %d: memoFor made a new memo for the same rank count", ranks)
		}
		for pass := range 2 { // computed, then remembered
			for _, d := range []uint64{0, 1, 2, 31, 32, 127, 128, 129, 4095, 16383, 16384, 16385, 1 << 40} {
				const seq = 1 << 41
				want := rankDecay(seq+d, seq, ranks)
				if got := m.decay(seq+d, seq, ranks); math.Float64bits(got) != math.Float64bits(want) {
					t.Fatalf("ranks %d, distance %d, pass %d: memo %v, rankDecay %v", ranks, d, pass, got, want)
				}
				if got, want := m.decay(seq+d, seq, ranks+1), rankDecay(seq+d, seq, ranks+1); math.Float64bits(got) != math.Float64bits(want) {
					t.Fatalf("ranks %d (memo for %d), distance %d: %v, rankDecay %v", ranks+1, ranks, d, got, want)
				}
				if got := (*decayMemo)(nil).decay(seq+d, seq, ranks); math.Float64bits(got) != math.Float64bits(want) {
					t.Fatalf("no memo, ranks %d, distance %d: %v, rankDecay %v", ranks, d, got, want)
				}
			}
		}
		if n := len(m.k); n > decayMemoMax || n > decayMemoPerRank*max(ranks, 1) {
			t.Fatalf("ranks %d: memo of %d distances", ranks, n)
		}
	}
	if got := m.decay(5, 9, 1000); got != 1 {
		t.Fatalf("a rank ahead of the fleet's count: decay %v, want 1", got)
	}
}
