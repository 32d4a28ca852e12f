package replay

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// A lockstep replay (PlayConfig.Lockstep, vLLM-model engines only) makes the
// router's view at each Route exactly what it would be at the request's
// arrival, however long the machine takes to route, publish, deliver and
// apply. Without it, a Route or an event batch that is late by d of wall
// time is late by d x SpeedUp of simulated time: at 30x, a Route's 2 ms is
// 60 ms of engine time in which later Routes see a stale fleet, so the
// replay charges the router for the harness's machine.
//
// Two gates keep it conservative:
//
//   - Before the first Route of arrival A, the dispatcher waits until every
//     request arriving before A has been handed to its engine, every engine
//     has published every step that ends by A,
//     every mark those steps caused has been answered, and every router has
//     applied every batch published (PlayConfig.Settle) and, with
//     replicas, every load change the others shared: the Routes and marks
//     so far. Requests of one arrival are still routed at once, as a burst
//     is, and handed out in the order their Routes were answered
//     (handorder.go).
//   - An engine publishes a step that ends at E only once every request
//     arriving before E has been handed to an engine, so no Route sees a
//     step that ends after its arrival.
//
// While the dispatcher waits past A's wall time, the clock pauses at A
// (Clock.HoldAt): simulated time stands still while the harness catches up,
// and the router, whose own clock is wall time, sees engine time go by at
// the speed-up between pauses.

// engineSync is one engine's side of a lockstep replay. A nil *engineSync
// (a replay that is not in lockstep) does nothing.
type engineSync struct {
	// through: every step of the engine that ends at or before it is
	// published, and none will be (the stepper's claims: an idle engine's
	// watermark, a step's start, a step's end less a nanosecond).
	through atomic.Int64
	// handed is the player's: every request arriving before it is handed to
	// its engine.
	handed *atomic.Int64
}

func (s *engineSync) publishedThrough(t time.Duration) {
	if s != nil {
		s.through.Store(int64(t))
	}
}

// mayPublish waits until the step that ends at end may be published.
func (s *engineSync) mayPublish(ctx context.Context, end time.Duration) error {
	if s == nil {
		return nil
	}
	return waitUntil(ctx, func() bool { return s.handed.Load() >= int64(end) })
}

// caughtUp reports whether the engine has published every step ending by
// at.
func (s *engineSync) caughtUp(at time.Duration) bool {
	return s.through.Load() >= int64(at)
}

// lockstep is the player's side: its engines, the marks in flight, and the
// batches published since the routers last settled.
type lockstep struct {
	engines   []*engineSync
	handed    atomic.Int64
	marks     atomic.Int64
	published atomic.Int64
	settled   int64 // published when Settle last returned (the dispatcher's)
	settle    func(context.Context) error
	always    bool          // settle before every arrival (PlayConfig.SettleLoad)
	paused    time.Duration // how long the clock was held, in all (the dispatcher's)
}

func newLockstep(n int, settle func(context.Context) error, always bool) *lockstep {
	ls := &lockstep{engines: make([]*engineSync, n), settle: settle, always: always}
	for i := range ls.engines {
		ls.engines[i] = &engineSync{handed: &ls.handed}
	}
	return ls
}

// engine is engine w's side, nil when ls is.
func (ls *lockstep) engine(w int) *engineSync {
	if ls == nil {
		return nil
	}
	return ls.engines[w]
}

// markSent and markAnswered count a mark in flight; a nil ls counts nothing.
func (ls *lockstep) markSent() {
	if ls != nil {
		ls.marks.Add(1)
	}
}

func (ls *lockstep) markAnswered() {
	if ls != nil {
		ls.marks.Add(-1)
	}
}

func (ls *lockstep) didPublish() {
	if ls != nil {
		ls.published.Add(1)
	}
}

// handedThrough records that every request arriving before wm is handed out.
func (ls *lockstep) handedThrough(wm time.Duration) {
	if ls != nil {
		ls.handed.Store(int64(wm))
	}
}

// await waits until the fleet and the routers are where they would be at
// arrival, then holds the clock there if wall time has passed it.
func (ls *lockstep) await(ctx context.Context, clock Clock, arrival time.Duration) error {
	if ls == nil {
		return nil
	}
	err := waitUntil(ctx, func() bool {
		if ls.handed.Load() < int64(arrival) || ls.marks.Load() != 0 {
			return false
		}
		for _, e := range ls.engines {
			if !e.caughtUp(arrival) {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	// The engines cannot publish past arrival until it is routed, so what
	// the routers are to apply is fixed now.
	if pub := ls.published.Load(); ls.settle != nil && (pub != ls.settled || ls.always) {
		if err := ls.settle(ctx); err != nil {
			return err
		}
		ls.settled = pub
	}
	ls.paused += clock.HoldAt(arrival)
	return nil
}

// waitUntil polls cond until it holds or ctx ends: first yielding the
// processor, then sleeping up to a millisecond between polls.
func waitUntil(ctx context.Context, cond func() bool) error {
	pause := 10 * time.Microsecond
	for i := 0; !cond(); i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if i < 8 {
			runtime.Gosched()
			continue
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
	return nil
}
