package replay

import (
	"context"
	"math"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
)

// A vLLM-model engine's simulated time advances step by step, and a step's
// batch depends on every request that has arrived by its start. The player
// feeds each engine's stepper its own requests in arrival order and, after
// every request it hands out, a watermark to all engines: the arrival of the
// next request, before which none is still to come. A stepper starts a step
// at simulated time t only once the watermark is past t, so its batches do
// not depend on how long routing took, and not before t's wall time, so the
// router sees its KV events and marks when a real engine would send them.

// noMore is the watermark once every request has been handed out.
const noMore = time.Duration(math.MaxInt64)

// stepHooks are what a stepper reports to the player.
type stepHooks struct {
	publish func([]engine.Event)
	// first is called when j produced its first token at simulated time at;
	// finished when it produced its last (after first); dropped when it never
	// will (refused by the engine, or the replay was cancelled).
	first, finished func(j *liveJob, at time.Duration)
	dropped         func(j *liveJob, err error)
	// sync, when set, is the engine's part of a lockstep replay (lockstep.go).
	sync *engineSync
}

// liveJob is a request an engine is serving.
type liveJob struct {
	job
	done    chan struct{} // closed when it finishes or is dropped
	marking bool          // a goroutine is marking it to the router
	first   time.Duration // when its first token came (simulated)
	// scheduled is when its first step began, prefilled the tokens its
	// steps computed up to its first token (a preempted request's again).
	scheduled time.Duration
	prefilled int
}

// runStepper serves q's requests on e (a ModelVLLM engine) until q is
// closed and every request has finished, or ctx ends.
// It is longer than ~80 lines: one event loop over the stepper's state,
// whose branches share it.
func runStepper(ctx context.Context, e *engine.Engine, q <-chan job, clock Clock, h stepHooks) {
	var (
		pending []job // received, not yet arrived on the engine's clock
		live    = map[uint64]*liveJob{}
		next    uint64
		now     time.Duration
		wm      time.Duration
		closed  bool
	)
	take := func(j job, ok bool) {
		if !ok {
			closed = true
			return
		}
		wm = max(wm, j.wm)
		if !j.markOnly {
			pending = append(pending, j)
		}
	}
	defer func() { // cancelled: release everything still held
		for _, lj := range live {
			h.dropped(lj, ctx.Err())
		}
		for _, j := range pending {
			h.dropped(&liveJob{job: j, done: make(chan struct{})}, ctx.Err())
		}
		for j := range q {
			if !j.markOnly {
				h.dropped(&liveJob{job: j, done: make(chan struct{})}, ctx.Err())
			}
		}
	}()
	for {
		for drained := false; !drained && !closed; {
			select {
			case j, ok := <-q:
				take(j, ok)
			default:
				drained = true
			}
		}
		var t time.Duration
		switch {
		case e.HasWork():
			t = now
		case len(pending) > 0:
			t = max(now, pending[0].arrival)
		case closed:
			return
		}
		if !closed && (wm <= t || (!e.HasWork() && len(pending) == 0)) {
			// Every step that ends by wm is published: none starts before
			// t, and an idle engine gets no request arriving before wm.
			h.sync.publishedThrough(wm)
			select {
			case j, ok := <-q:
				take(j, ok)
			case <-ctx.Done():
				return
			}
			continue
		}
		for len(pending) > 0 && pending[0].arrival <= t {
			j := pending[0]
			pending = pending[1:]
			lj := &liveJob{job: j, done: make(chan struct{})}
			if err := e.Submit(next, engine.Request{Tokens: j.tokens, OutputTokens: j.output}); err != nil {
				h.dropped(lj, err)
				continue
			}
			live[next] = lj
			next++
		}
		h.sync.publishedThrough(t)
		if clock.SleepUntil(ctx, t) != nil {
			return
		}
		st := e.Step()
		if st.Duration == 0 {
			now = t
			continue
		}
		end := t + st.Duration
		h.sync.publishedThrough(end - 1)
		if h.sync.mayPublish(ctx, end) != nil || clock.SleepUntil(ctx, end) != nil {
			return
		}
		h.publish(st.Events)
		notePrefill(live, st.Batch, t)
		for _, id := range st.FirstToken {
			h.first(live[id], end)
		}
		for _, id := range st.Finished {
			h.finished(live[id], end)
			delete(live, id)
		}
		now = end
	}
}

// notePrefill credits a step that began at t to the batch's requests that
// have no first token yet.
func notePrefill(live map[uint64]*liveJob, batch []engine.BatchEntry, t time.Duration) {
	for _, b := range batch {
		lj := live[b.ID]
		if lj == nil || lj.first > 0 {
			continue
		}
		if lj.prefilled == 0 { // its first step (a scheduled prefill computes a token at least)
			lj.scheduled = t
		}
		lj.prefilled += b.Tokens
	}
}
