package engine

import (
	"context"
	"errors"
	"time"
)

// Timed is a Backend serving an old-model engine (ModelOld) on a clock:
// simulated time runs SpeedUp times faster than wall time from T0. Each
// job arrives at the simulated now, its KV events are published when its
// prefill starts, first is called when the prefill is done, and Serve
// returns at the finish.
type Timed struct {
	Engine  *Engine
	T0      time.Time
	SpeedUp float64
}

// ErrNeedsOldModel is returned by Timed for a ModelVLLM engine, which
// needs a stepper driving it (bench/replay's player).
var ErrNeedsOldModel = errors.New("engine: the Timed backend serves the old model only")

func (t *Timed) sim(at time.Time) time.Duration {
	return time.Duration(float64(at.Sub(t.T0)) * t.SpeedUp)
}

func (t *Timed) wall(sim time.Duration) time.Time {
	return t.T0.Add(time.Duration(float64(sim) / t.SpeedUp))
}

// Serve implements Backend.
func (t *Timed) Serve(ctx context.Context, j *Job, first func()) error {
	if t.Engine.Model() != ModelOld {
		return ErrNeedsOldModel
	}
	r := t.Engine.Serve(Request{Tokens: j.Tokens, OutputTokens: j.MaxTokens, Arrival: t.sim(time.Now())})
	if err := waitUntil(ctx, t.wall(r.Start)); err != nil {
		return err
	}
	if err := t.Engine.Publish(r.Events); err != nil {
		return err
	}
	if err := waitUntil(ctx, t.wall(r.PrefillDone)); err != nil {
		return err
	}
	first()
	return waitUntil(ctx, t.wall(r.Finish))
}

// waitUntil waits for the simulated engine's next moment, or ctx's end.
func waitUntil(ctx context.Context, at time.Time) error {
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
