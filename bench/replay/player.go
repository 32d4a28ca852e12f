package replay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/trace"
	"google.golang.org/grpc"
)

// Clock maps simulated time (trace time) to wall time: wall = T0 + sim/SpeedUp.
type Clock struct {
	T0      time.Time
	SpeedUp float64
}

// Wall is the wall time of simulated time sim.
func (c Clock) Wall(sim time.Duration) time.Time {
	return c.T0.Add(time.Duration(float64(sim) / c.SpeedUp))
}

// Sim is the simulated time of wall time t.
func (c Clock) Sim(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(c.T0)) * c.SpeedUp)
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
	Fleet    *Fleet
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
}

type job struct {
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

// Play replays the requests at their arrival times and waits until every
// request has finished on its engine.
func Play(ctx context.Context, cfg PlayConfig) (*PlayResult, error) {
	n := len(cfg.Fleet.Engines)
	if n == 0 {
		return nil, fmt.Errorf("play: empty fleet")
	}
	res := &PlayResult{Requests: len(cfg.Requests), PromptTokens: make([]uint64, n)}
	start := time.Now()
	var (
		mu       sync.Mutex // guards res.TTFT, PromptTokens
		markErrs atomic.Int64
		pubErrs  atomic.Int64
		firstErr atomic.Value
		inflight sync.WaitGroup
		workers  sync.WaitGroup
	)
	noteErr := func(err error) {
		firstErr.CompareAndSwap(nil, err.Error())
	}
	stepped := cfg.Fleet.Engines[0].Model() == engine.ModelVLLM
	var dropped atomic.Int64
	queues := make([]chan job, n)
	for w := range queues {
		queues[w] = make(chan job, 4096)
		workers.Add(1)
		if stepped {
			go func(w int) {
				defer workers.Done()
				runStepper(ctx, cfg.Fleet.Engines[w], queues[w], cfg.Clock, stepHooks{
					publish: func(evs []engine.Event) {
						if err := cfg.Fleet.Engines[w].Publish(evs); err != nil {
							pubErrs.Add(1)
							noteErr(err)
						}
					},
					first: func(j *liveJob, at time.Duration) {
						mu.Lock()
						res.TTFT = append(res.TTFT, at-j.arrival)
						res.PromptTokens[w] += uint64(len(j.tokens))
						mu.Unlock()
						if j.routed && cfg.Router != nil {
							j.marking = true
							go func() {
								defer inflight.Done()
								mark(ctx, cfg.Router.MarkPrefillDone, j.id, &markErrs, noteErr)
								<-j.done
								mark(ctx, cfg.Router.MarkFinished, j.id, &markErrs, noteErr)
							}()
						}
					},
					finished: func(j *liveJob, _ time.Duration) {
						close(j.done)
						if !j.marking {
							inflight.Done()
						}
					},
					dropped: func(j *liveJob, err error) {
						if ctx.Err() == nil {
							dropped.Add(1)
							noteErr(err)
						}
						close(j.done)
						if j.marking {
							return
						}
						if !j.routed || cfg.Router == nil || ctx.Err() != nil {
							inflight.Done()
							return
						}
						go func() { // the router counts it as load until told
							defer inflight.Done()
							mark(ctx, cfg.Router.MarkFinished, j.id, &markErrs, noteErr)
						}()
					},
				})
			}(w)
			continue
		}
		go func(w int) {
			defer workers.Done()
			e := cfg.Fleet.Engines[w]
			for j := range queues[w] {
				r := e.Serve(engine.Request{Tokens: j.tokens, OutputTokens: j.output, Arrival: j.arrival})
				_ = sleepUntil(ctx, cfg.Clock.Wall(r.Start))
				if err := e.Publish(r.Events); err != nil {
					pubErrs.Add(1)
					noteErr(err)
				}
				_ = sleepUntil(ctx, cfg.Clock.Wall(r.PrefillDone))
				mu.Lock()
				res.TTFT = append(res.TTFT, r.PrefillDone-j.arrival)
				res.PromptTokens[w] += uint64(len(j.tokens))
				mu.Unlock()
				if cfg.OnTTFT != nil {
					cfg.OnTTFT(r.PrefillDone - j.arrival)
				}
				go func(j job, finish time.Time) {
					defer inflight.Done()
					if j.routed && cfg.Router != nil {
						if _, err := cfg.Router.MarkPrefillDone(ctx, &kvrouterv1.RequestRef{RequestId: j.id}); err != nil && ctx.Err() == nil {
							markErrs.Add(1)
							noteErr(fmt.Errorf("MarkPrefillDone %s: %w", j.id, err))
						}
					}
					_ = sleepUntil(ctx, finish)
					if j.routed && cfg.Router != nil {
						if _, err := cfg.Router.MarkFinished(ctx, &kvrouterv1.RequestRef{RequestId: j.id}); err != nil && ctx.Err() == nil {
							markErrs.Add(1)
							noteErr(fmt.Errorf("MarkFinished %s: %w", j.id, err))
						}
					}
				}(j, cfg.Clock.Wall(r.Finish))
			}
		}(w)
	}

	var dispatched atomic.Int64
	var lagNs atomic.Int64
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if cfg.OnProgress == nil {
			return
		}
		every := cfg.ProgressEvery
		if every <= 0 {
			every = 2 * time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				cfg.OnProgress(Progress{Dispatched: int(dispatched.Load()), Total: len(cfg.Requests),
					Sim: cfg.Clock.Sim(time.Now()) - cfg.Offset, Lag: time.Duration(lagNs.Load())})
			}
		}
	}()

	// The dispatcher issues choices concurrently (up to Concurrency in flight,
	// as a gateway would) and a forwarder hands them to the engines in arrival
	// order, so each engine still serves its requests first come, first served.
	type pending struct {
		j   job
		seq int
		c   Choice
		err error
		ok  chan struct{}
	}
	conc := cfg.Concurrency
	if conc <= 0 {
		conc = DefaultConcurrency
	}
	sem := make(chan struct{}, conc)
	order := make(chan *pending, conc)
	fwdDone := make(chan struct{})
	go func() {
		defer close(fwdDone)
		var bursts burstCounter
		defer func() { res.BurstRequests, res.BurstPiled = bursts.Requests, bursts.Piled }()
		for p := range order {
			<-p.ok
			c, cerr := p.c, p.err
			if cerr != nil || c.Engine < 0 || c.Engine >= n {
				if cerr == nil {
					cerr = fmt.Errorf("engine index %d out of range", c.Engine)
				}
				if ctx.Err() != nil {
					continue
				}
				res.ChooseErrors++
				noteErr(fmt.Errorf("choose request %d: %w", p.seq, cerr))
				c = Choice{Engine: p.seq % n}
			}
			if p.j.text != "" && !tokenizeJob(&p.j, cfg.Body, cfg.Fleet.Engines[c.Engine], &dropped, noteErr) {
				continue
			}
			p.j.routed = c.Routed
			bursts.add(p.j.arrival, c.Engine)
			if c.Routed {
				res.RouteLatency = append(res.RouteLatency, c.RouteLatency)
				res.RouterMatched += uint64(c.Matched)
				res.RouterPromptBlocks += uint64(c.PromptBlocks)
			}
			inflight.Add(1)
			if stepped {
				p.j.wm = noMore
				if p.seq+1 < len(cfg.Requests) {
					p.j.wm = cfg.Offset + cfg.Requests[p.seq+1].Arrival
				}
			}
			select {
			case queues[c.Engine] <- p.j:
				dispatched.Add(1)
			case <-ctx.Done():
				inflight.Done()
			}
			if stepped {
				for w := range queues {
					if w == c.Engine {
						continue
					}
					select {
					case queues[w] <- job{wm: p.j.wm, markOnly: true}:
					case <-ctx.Done():
					}
				}
			}
		}
	}()
	var err error
	for i, r := range cfg.Requests {
		arrival := cfg.Offset + r.Arrival
		if err = sleepUntil(ctx, cfg.Clock.Wall(arrival)); err != nil {
			break
		}
		p := &pending{seq: i, ok: make(chan struct{})}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			break
		}
		lag := time.Since(cfg.Clock.Wall(arrival))
		lagNs.Store(int64(lag))
		res.MaxLag = max(res.MaxLag, lag)
		p.j = job{id: fmt.Sprintf("%s%d", cfg.IDPrefix, i), output: r.OutputLength, arrival: arrival}
		if cfg.Text != nil {
			p.j.text = cfg.Text(i)
		} else {
			p.j.tokens = r.Tokens(nil)
		}
		order <- p // never blocks long: at most conc choices are unfinished
		go func() {
			p.c, p.err = cfg.Choose(ctx, p.seq, p.j.tokens, p.j.id)
			<-sem
			close(p.ok)
		}()
	}
	close(order)
	<-fwdDone
	for _, q := range queues {
		close(q)
	}
	workers.Wait()
	inflight.Wait()
	close(stopProgress)
	<-progressDone
	res.Wall = time.Since(start)
	res.MarkErrors = markErrs.Load()
	res.Dropped = dropped.Load()
	res.PublishErrs = pubErrs.Load()
	if s, ok := firstErr.Load().(string); ok {
		res.FirstError = s
	}
	return res, err
}

// mark sends one mark to the router, counting a failure unless the replay
// was cancelled.
func mark(ctx context.Context, call func(context.Context, *kvrouterv1.RequestRef, ...grpc.CallOption) (*kvrouterv1.Ack, error),
	id string, errs *atomic.Int64, note func(error)) {
	if _, err := call(ctx, &kvrouterv1.RequestRef{RequestId: id}); err != nil && ctx.Err() == nil {
		errs.Add(1)
		note(fmt.Errorf("mark %s: %w", id, err))
	}
}
