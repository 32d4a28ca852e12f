package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"context"
	"fmt"
	"sync/atomic"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/trace"
	"google.golang.org/grpc"
)

// Clock maps simulated time (trace time) to wall time: wall = T0 + paused +
// sim/SpeedUp, where paused is how long a lockstep replay has held simulated
// time still (lockstep.go); it only grows.
type Clock struct {
	T0      time.Time
	SpeedUp float64
	// paused, when set, is shared by every copy of the clock.
	paused *atomic.Int64
}

// Pausable returns c with a pause of its own (zero so far).
func (c Clock) Pausable() Clock {
	c.paused = new(atomic.Int64)
	return c
}

func (c Clock) pause() time.Duration {
	if c.paused == nil {
		return 0
	}
	return time.Duration(c.paused.Load())
}

// Wall is the wall time of simulated time sim.
func (c Clock) Wall(sim time.Duration) time.Time {
	return c.T0.Add(c.pause() + time.Duration(float64(sim)/c.SpeedUp))
}

// Sim is the simulated time of wall time t.
func (c Clock) Sim(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(c.T0)-c.pause()) * c.SpeedUp)
}

// HoldAt pauses simulated time at sim if wall time has passed it: what is
// due at sim is then due now. It reports how long it paused. A clock without
// a pause of its own never pauses.
func (c Clock) HoldAt(sim time.Duration) time.Duration {
	if c.paused == nil {
		return 0
	}
	late := time.Since(c.Wall(sim))
	if late <= 0 {
		return 0
	}
	c.paused.Add(int64(late))
	return late
}

// SleepUntil waits until simulated time sim (or ctx ends), however often
// the clock pauses meanwhile.
func (c Clock) SleepUntil(ctx context.Context, sim time.Duration) error {
	for {
		w := c.Wall(sim)
		if !time.Now().Before(w) {
			return ctx.Err()
		}
		if err := sleepUntil(ctx, w); err != nil {
			return err
		}
	}
}

// sleepUntil waits until t or ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
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

// Choice is a policy's answer for one request.
type Choice struct {
	// Engine is the index of the chosen engine in the fleet.
	Engine int
	// Routed reports that the router made the choice and tracks the request,
	// so the player must mark its prefill done and finish.
	Routed bool
	// RouteLatency is the Route call's latency when Routed.
	RouteLatency time.Duration
	// Matched and PromptBlocks are the router's view of the choice.
	Matched, PromptBlocks uint32
}

// ChooseFunc picks an engine for request seq (tokens, id). An error makes the
// player fall back to round-robin for that request and count it. Play calls
// it from several goroutines at once.
type ChooseFunc func(ctx context.Context, seq int, tokens []uint32, id string) (Choice, error)

// PlayConfig configures one replay of requests against a fleet.
type PlayConfig struct {
	Fleet    *harness.Fleet
	Requests []trace.Request
	Clock    Clock
	// Offset is added to every arrival (to play a trace slice again later).
	Offset time.Duration
	Choose ChooseFunc
	// Router receives MarkPrefillDone and MarkFinished for routed requests.
	Router kvrouterv1.RouterClient
	// IDPrefix prefixes request ids.
	IDPrefix string
	// Concurrency bounds the choices (Route calls) in flight (default
	// DefaultConcurrency). Choose must be safe for concurrent use.
	Concurrency int
	// OnTTFT, if set, is called with each request's simulated time to first
	// token as it is known, from the engines' goroutines.
	OnTTFT func(time.Duration)
	// OnProgress, if set, is called about every ProgressEvery with the counts so far.
	OnProgress    func(Progress)
	ProgressEvery time.Duration
	// Text, if set, gives request seq's prompt as text (text.go): Choose gets nil tokens, and the
	// chosen engine tokenizes the text itself, as a real engine does.
	Text func(seq int) string
	// Body makes Text's strings OpenAI request bodies (Prompt.openai_body).
	Body bool
	// Lockstep replays in lockstep (lockstep.go): each Route sees the fleet
	// and the routers exactly as they are at its arrival. vLLM model only.
	Lockstep bool
	// Settle, in lockstep, returns once every router has applied every event
	// batch the engines have published, and with SettleLoad every load
	// change the replicas have shared.
	Settle func(context.Context) error
	// SettleLoad: Settle waits for replicas' shared load too, which every
	// Route and mark changes, so it is called before every arrival, not
	// only after the engines published.
	SettleLoad bool
	// Records keeps a RequestRecord per request that reached its first
	// token (vLLM model only) in PlayResult.Records.
	Records bool
}

// Progress is a snapshot of a replay in flight.
type Progress struct {
	Dispatched, Total int
	Sim               time.Duration
	Lag               time.Duration
}

// PlayResult is what one replay measured.
type PlayResult struct {
	Requests int
	// TTFT are simulated times to first token, one per request.
	TTFT []time.Duration
	// TPOT are simulated times per output token after the first, one per
	// request of more than one output token (vLLM engine model only: the
	// old model decodes at a fixed rate whatever the engine holds).
	TPOT []time.Duration
	// RouteLatency are Route latencies of routed requests.
	RouteLatency []time.Duration
	// RouterMatched and RouterPromptBlocks sum the router's own view.
	RouterMatched, RouterPromptBlocks uint64
	// PromptTokens per engine.
	PromptTokens []uint64
	ChooseErrors int
	// BurstRequests are the requests that arrived with others at one
	// instant; BurstPiled those sent to an engine an earlier one of their
	// instant went to (burst.go).
	BurstRequests, BurstPiled int
	// Dropped counts requests an engine refused (too long for its KV blocks).
	Dropped     int64
	MarkErrors  int64
	PublishErrs int64
	FirstError  string
	MaxLag      time.Duration
	Wall        time.Duration
	// Paused is how long a lockstep replay held simulated time still.
	Paused time.Duration
	// Records, with PlayConfig.Records, in first-token order.
	Records []RequestRecord
}

type job struct {
	seq     int // the request's index in PlayConfig.Requests
	id      string
	tokens  []uint32
	text    string // a text prompt, tokenized by the chosen engine
	output  int
	arrival time.Duration
	routed  bool
	// wm and markOnly feed a vLLM-model engine's stepper (stepper.go): no
	// request arriving before wm is still to come; a markOnly job carries
	// nothing else.
	wm       time.Duration
	markOnly bool
}

// DefaultConcurrency is PlayConfig.Concurrency's default.
const DefaultConcurrency = 32

// mark sends one mark to the router, counting a failure unless the replay
// was cancelled.
func mark(ctx context.Context, call func(context.Context, *kvrouterv1.RequestRef, ...grpc.CallOption) (*kvrouterv1.Ack, error),
	id string, errs *atomic.Int64, note func(error)) {
	if _, err := call(ctx, &kvrouterv1.RequestRef{RequestId: id}); err != nil && ctx.Err() == nil {
		errs.Add(1)
		note(fmt.Errorf("mark %s: %w", id, err))
	}
}
