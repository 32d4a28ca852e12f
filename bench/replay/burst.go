package replay

import "time"

// burstCounter measures how a policy spreads a burst: requests that share
// one arrival instant (a trace's same-millisecond timestamp). Fed the
// requests in arrival order with the engine each went to, it counts the
// requests of bursts (two or more at one instant) and, of those, the ones
// sent to an engine an earlier request of the same burst went to. Replicas
// that decide a burst on the same state pile it (they choose alike before
// each other's choices reach them); one router sees each choice before the
// next. Some piling is right (a session's turns share a cache), so the
// count is read against one router's on the same trace. It does no I/O.
type burstCounter struct {
	at      time.Duration
	engines []int // engines of the burst so far (a burst is a few requests)
	// Requests are the requests of bursts; Piled those that went to an
	// engine an earlier request of their burst went to.
	Requests, Piled int
}

// add records a request arriving at at, sent to engine.
func (b *burstCounter) add(at time.Duration, engine int) {
	if len(b.engines) == 0 || at != b.at {
		b.at, b.engines = at, append(b.engines[:0], engine)
		return
	}
	if len(b.engines) == 1 {
		b.Requests++ // the burst's first, now known to be one
	}
	b.Requests++
	for _, e := range b.engines {
		if e == engine {
			b.Piled++
			break
		}
	}
	b.engines = append(b.engines, engine)
}
