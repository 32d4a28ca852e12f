package scoring

// The time policy's fleet queue averages the pending prefills of a model's
// ranks at every Route. model.pending keeps their sum as requests start and
// end their prefill, instead of a Route summing it over every rank of the
// model: a rank counts while it is on its model's list, from AddWorker until
// RemoveWorker takes it off (unlist), which is the rank set a Route sees.
// Every change is under model.mu.

// pendingChanged adds d to the model's sum, unless rk is off the list.
func (m *model) pendingChanged(rk *rank, d int64) {
	if !rk.unlisted {
		m.pending += d
	}
}

// unlist takes ranks (of m), just taken off m's list, out of the sum and
// the guard's total. Their requests are released later (dropWorker),
// without counting again. The caller holds Router.mu.
func (m *model) unlist(ranks []*rank) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rk := range ranks {
		if !rk.unlisted {
			m.pendingChanged(rk, -rk.timing.pending)
			m.fleet.balance.total = max(0, m.fleet.balance.total-rk.routed) // (balance.go)
			rk.unlisted = true
		}
	}
}
