package scoring

// The time policy's fleet queue averages the pending prefills of a model's
// ranks at every Route. loadTable.pending keeps their sum per model as
// requests start and end their prefill, instead of a Route summing it over
// every rank of the model: a rank counts while it is on its model's list,
// from AddWorker until RemoveWorker takes it off (unlist), which is the rank
// set a Route sees. Every change is under loadTable.mu.

// pendingChanged adds d to rk's model's sum, unless rk is off the list.
func (t *loadTable) pendingChanged(rk *rank, d int64) {
	if rk.unlisted {
		return
	}
	m := rk.worker.Model
	if n := t.pending[m] + d; n != 0 {
		t.pending[m] = n
	} else {
		delete(t.pending, m)
	}
}

// unlist takes ranks, just taken off their model's list, out of the sums.
// Their requests are released later (dropWorker), without counting again.
// The caller holds Router.mu.
func (t *loadTable) unlist(ranks []*rank) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, rk := range ranks {
		if !rk.unlisted {
			t.pendingChanged(rk, -rk.timing.pending)
			t.unlistedBalance(rk) // (balance.go)
			rk.unlisted = true
		}
	}
}
