package scoring

// decayMemo remembers rankDecay's values for one model's rank count, by
// distance: timeCoster needs a rank's decay for every candidate of every
// Route, and an exp2 per candidate was a large part of a Route against a
// thousand ranks. rankDecay is a pure function of the distance (fleet
// samples since the rank's last one) and the rank count, so a remembered
// value is the one rankDecay returns, bit for bit, and costs are unchanged.
// Guarded by its model's lock.
type decayMemo struct {
	ranks int
	k     []float64 // k[d-1]: rankDecay at distance d; 0 not computed yet
}

// decayMemoMax bounds a memo's distances; it holds at most
// decayMemoPerRank per rank of the model too, so a model's memo costs at
// most 8 x 128 bytes per rank. Farther ranks are computed each time.
const (
	decayMemoMax     = 1 << 14
	decayMemoPerRank = 4 * rankHalfLife
)

// memoFor returns m when it is for ranks, else a new memo for ranks.
func (m *decayMemo) memoFor(ranks int) *decayMemo {
	if m != nil && m.ranks == ranks {
		return m
	}
	return &decayMemo{ranks: ranks, k: make([]float64, min(decayMemoMax, decayMemoPerRank*max(ranks, 1)))}
}

// decay is rankDecay(fleetSeq, seq, ranks), from the memo when m is for
// ranks.
func (m *decayMemo) decay(fleetSeq, seq uint64, ranks int) float64 {
	if fleetSeq <= seq {
		return 1
	}
	d := fleetSeq - seq
	if m == nil || m.ranks != ranks || d > uint64(len(m.k)) {
		return rankDecay(fleetSeq, seq, ranks)
	}
	if k := m.k[d-1]; k != 0 {
		return k
	}
	k := rankDecay(fleetSeq, seq, ranks)
	m.k[d-1] = k
	return k
}
