package replay

import (
	"cmp"
	"slices"
)

// In lockstep a trace's requests of one arrival are routed at once, as a
// burst that reaches the gateway in the same instant. A gateway forwards
// each request to its engine when its Route answers, so an engine that
// gets several of the burst queues them in the order their Routes were
// answered, which is the order the router decided them in and counted each
// one's load behind the others'. Handing them out in the trace's order
// instead would queue a request the router placed behind another ahead of
// it. Choices that consult no router (round-robin, random) have no such
// order and keep the trace's, so their replay stays deterministic.

// burstOf reads from order the rest of first's arrival (requests arrive in
// the trace's order, so they follow it) and waits for every choice of it.
func (p *player) burstOf(first *pending, order <-chan *pending) []*pending {
	reqs := p.cfg.Requests
	burst := []*pending{first}
	for s := first.seq; s+1 < len(reqs) && reqs[s+1].Arrival == reqs[first.seq].Arrival; s++ {
		pd, ok := <-order
		if !ok {
			break
		}
		burst = append(burst, pd)
	}
	for _, pd := range burst {
		<-pd.ok
	}
	return burst
}

// answeredOrder sorts a burst by when its Routes were answered, unless one
// of its choices consulted no router.
func answeredOrder(burst []*pending) {
	for _, pd := range burst {
		if pd.err != nil || !pd.c.Routed {
			return
		}
	}
	slices.SortStableFunc(burst, func(a, b *pending) int { return cmp.Compare(a.answered, b.answered) })
}

// forwardBursts is forward in lockstep: each arrival's requests are handed
// out together, in the order their Routes were answered; the watermark
// stays at the arrival until the burst's last is handed.
func (p *player) forwardBursts(order <-chan *pending, bursts *burstCounter) {
	for first := range order {
		burst := p.burstOf(first, order)
		answeredOrder(burst)
		last := first.seq + len(burst) - 1
		arrival := first.j.arrival
		for i, pd := range burst {
			wm := arrival
			if i == len(burst)-1 {
				wm = p.nextArrival(last)
			}
			p.hand(pd, wm, bursts)
			p.ls.handedThrough(wm)
		}
	}
}
