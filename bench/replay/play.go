package replay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
)

// player is one Play's shared state: the engines' queues, the counters the
// workers add to and the result they fill.
type player struct {
	ctx     context.Context
	cfg     PlayConfig
	n       int
	stepped bool // vLLM-model engines, each run by a stepper
	res     *PlayResult
	queues  []chan job
	ls      *lockstep    // nil unless cfg.Lockstep
	answers atomic.Int64 // choices made, numbering pending.answered

	mu         sync.Mutex // guards res.TTFT, res.TPOT, res.PromptTokens
	markErrs   atomic.Int64
	pubErrs    atomic.Int64
	dropped    atomic.Int64
	dispatched atomic.Int64
	lagNs      atomic.Int64
	firstErr   atomic.Value
	inflight   sync.WaitGroup // a request from its dispatch to its last mark
	workers    sync.WaitGroup
}

func (p *player) noteErr(err error) {
	p.firstErr.CompareAndSwap(nil, err.Error())
}

// pending is one request between its dispatch and its hand-over to an
// engine: ok closes when its choice (c or err) is made.
type pending struct {
	j   job
	seq int
	c   Choice
	err error
	ok  chan struct{}
	// answered numbers the choice among all made (handorder.go).
	answered int64
}

// Play replays the requests at their arrival times and waits until every
// request has finished on its engine.
func Play(ctx context.Context, cfg PlayConfig) (*PlayResult, error) {
	n := len(cfg.Fleet.Engines)
	if n == 0 {
		return nil, fmt.Errorf("play: empty fleet")
	}
	p := &player{
		ctx: ctx, cfg: cfg, n: n,
		stepped: cfg.Fleet.Engines[0].Model() == engine.ModelVLLM,
		res:     &PlayResult{Requests: len(cfg.Requests), PromptTokens: make([]uint64, n)},
		queues:  make([]chan job, n),
	}
	if cfg.Lockstep {
		if !p.stepped {
			return nil, fmt.Errorf("play: lockstep needs the vLLM engine model")
		}
		if cfg.Clock.paused == nil {
			cfg.Clock = cfg.Clock.Pausable()
			p.cfg.Clock = cfg.Clock
		}
		p.ls = newLockstep(n, cfg.Settle, cfg.SettleLoad)
	}
	start := time.Now()
	for w := range p.queues {
		p.queues[w] = make(chan job, 4096)
		p.workers.Add(1)
		if p.stepped {
			go p.stepperWorker(w)
		} else {
			go p.serialWorker(w)
		}
	}
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go p.progress(stopProgress, progressDone)

	// The dispatcher issues choices concurrently (up to Concurrency in flight,
	// as a gateway would) and a forwarder hands them to the engines in arrival
	// order, so each engine still serves its requests first come, first served.
	conc := cfg.Concurrency
	if conc <= 0 {
		conc = DefaultConcurrency
	}
	order := make(chan *pending, conc)
	fwdDone := make(chan struct{})
	go p.forward(order, fwdDone)
	err := p.dispatch(order, conc)
	close(order)
	<-fwdDone
	for _, q := range p.queues {
		close(q)
	}
	p.workers.Wait()
	p.inflight.Wait()
	close(stopProgress)
	<-progressDone
	res := p.res
	res.Wall = time.Since(start)
	if p.ls != nil {
		res.Paused = p.ls.paused
	}
	res.MarkErrors = p.markErrs.Load()
	res.Dropped = p.dropped.Load()
	res.PublishErrs = p.pubErrs.Load()
	if s, ok := p.firstErr.Load().(string); ok {
		res.FirstError = s
	}
	return res, err
}

// dispatch issues each request's choice at its arrival time, at most conc
// at once, and queues it on order in arrival order. It returns the
// context's error if the replay was cut short.
func (p *player) dispatch(order chan<- *pending, conc int) error {
	ctx, cfg := p.ctx, p.cfg
	sem := make(chan struct{}, conc)
	for i, r := range cfg.Requests {
		arrival := cfg.Offset + r.Arrival
		if err := cfg.Clock.SleepUntil(ctx, arrival); err != nil {
			return err
		}
		if i > 0 && r.Arrival > cfg.Requests[i-1].Arrival {
			if err := p.ls.await(ctx, cfg.Clock, arrival); err != nil {
				return err
			}
		}
		pd := &pending{seq: i, ok: make(chan struct{})}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		lag := time.Since(cfg.Clock.Wall(arrival))
		p.lagNs.Store(int64(lag))
		p.res.MaxLag = max(p.res.MaxLag, lag)
		pd.j = job{seq: i, id: fmt.Sprintf("%s%d", cfg.IDPrefix, i), output: r.OutputLength, arrival: arrival}
		if cfg.Text != nil {
			pd.j.text = cfg.Text(i)
		} else {
			pd.j.tokens = r.Tokens(nil)
		}
		order <- pd // never blocks long: at most conc choices are unfinished
		go func() {
			pd.c, pd.err = cfg.Choose(ctx, pd.seq, pd.j.tokens, pd.j.id)
			pd.answered = p.answers.Add(1)
			<-sem
			close(pd.ok)
		}()
	}
	return nil
}

// forward hands each request, once chosen, to its engine's queue in
// arrival order (a failed choice falls back to engine seq mod n), and
// counts bursts and the router's answers.
func (p *player) forward(order <-chan *pending, done chan<- struct{}) {
	defer close(done)
	res := p.res
	var bursts burstCounter
	defer func() { res.BurstRequests, res.BurstPiled = bursts.Requests, bursts.Piled }()
	if p.ls != nil {
		p.forwardBursts(order, &bursts)
		return
	}
	for pd := range order {
		<-pd.ok
		next := p.nextArrival(pd.seq)
		p.hand(pd, next, &bursts)
		p.ls.handedThrough(next)
	}
}

// nextArrival is the arrival of request seq+1, noMore after the last.
func (p *player) nextArrival(seq int) time.Duration {
	if seq+1 < len(p.cfg.Requests) {
		return p.cfg.Offset + p.cfg.Requests[seq+1].Arrival
	}
	return noMore
}

// hand gives pd's request to its chosen engine's queue (a failed choice
// falls back to engine seq mod n) and, on the vLLM model, every other engine
// the watermark wm: the next request's arrival.
func (p *player) hand(pd *pending, wm time.Duration, bursts *burstCounter) {
	ctx, cfg, res := p.ctx, p.cfg, p.res
	c, cerr := pd.c, pd.err
	if cerr != nil || c.Engine < 0 || c.Engine >= p.n {
		if cerr == nil {
			cerr = fmt.Errorf("engine index %d out of range", c.Engine)
		}
		if ctx.Err() != nil {
			return
		}
		res.ChooseErrors++
		p.noteErr(fmt.Errorf("choose request %d: %w", pd.seq, cerr))
		c = Choice{Engine: pd.seq % p.n}
	}
	if pd.j.text != "" && !tokenizeJob(&pd.j, cfg.Body, cfg.Fleet.Engines[c.Engine], &p.dropped, p.noteErr) {
		if p.stepped {
			p.advanceOthers(-1, wm) // no engine gets it, and every one may step on
		}
		return
	}
	pd.j.routed = c.Routed
	bursts.add(pd.j.arrival, c.Engine)
	if c.Routed {
		res.RouteLatency = append(res.RouteLatency, c.RouteLatency)
		res.RouterMatched += uint64(c.Matched)
		res.RouterPromptBlocks += uint64(c.PromptBlocks)
	}
	p.inflight.Add(1)
	pd.j.wm = wm
	select {
	case p.queues[c.Engine] <- pd.j:
		p.dispatched.Add(1)
	case <-ctx.Done():
		p.inflight.Done()
	}
	if p.stepped {
		p.advanceOthers(c.Engine, wm)
	}
}

// advanceOthers tells every stepper but engine's that no request before wm
// is still to come, so it may step on.
func (p *player) advanceOthers(engine int, wm time.Duration) {
	for w := range p.queues {
		if w == engine {
			continue
		}
		select {
		case p.queues[w] <- job{wm: wm, markOnly: true}:
		case <-p.ctx.Done():
		}
	}
}

// progress calls cfg.OnProgress every ProgressEvery until stop closes.
func (p *player) progress(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	cfg := p.cfg
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
		case <-stop:
			return
		case <-t.C:
			cfg.OnProgress(Progress{Dispatched: int(p.dispatched.Load()), Total: len(cfg.Requests),
				Sim: cfg.Clock.Sim(time.Now()) - cfg.Offset, Lag: time.Duration(p.lagNs.Load())})
		}
	}
}

// serialWorker runs engine w under the old time model: one request at a
// time, the events published at its start, the marks sent at its prefill
// end and its finish.
func (p *player) serialWorker(w int) {
	defer p.workers.Done()
	ctx, cfg := p.ctx, p.cfg
	e := cfg.Fleet.Engines[w]
	for j := range p.queues[w] {
		r := e.Serve(engine.Request{Tokens: j.tokens, OutputTokens: j.output, Arrival: j.arrival})
		_ = sleepUntil(ctx, cfg.Clock.Wall(r.Start))
		if err := e.Publish(r.Events); err != nil {
			p.pubErrs.Add(1)
			p.noteErr(err)
		}
		_ = sleepUntil(ctx, cfg.Clock.Wall(r.PrefillDone))
		p.mu.Lock()
		p.res.TTFT = append(p.res.TTFT, r.PrefillDone-j.arrival)
		p.res.PromptTokens[w] += uint64(len(j.tokens))
		p.mu.Unlock()
		if cfg.OnTTFT != nil {
			cfg.OnTTFT(r.PrefillDone - j.arrival)
		}
		go p.serialMarks(j, cfg.Clock.Wall(r.Finish))
	}
}

// serialMarks sends a routed request's MarkPrefillDone now and its
// MarkFinished at finish.
func (p *player) serialMarks(j job, finish time.Time) {
	defer p.inflight.Done()
	ctx, router := p.ctx, p.cfg.Router
	if j.routed && router != nil {
		if _, err := router.MarkPrefillDone(ctx, &kvrouterv1.RequestRef{RequestId: j.id}); err != nil && ctx.Err() == nil {
			p.markErrs.Add(1)
			p.noteErr(fmt.Errorf("MarkPrefillDone %s: %w", j.id, err))
		}
	}
	_ = sleepUntil(ctx, finish)
	if j.routed && router != nil {
		if _, err := router.MarkFinished(ctx, &kvrouterv1.RequestRef{RequestId: j.id}); err != nil && ctx.Err() == nil {
			p.markErrs.Add(1)
			p.noteErr(fmt.Errorf("MarkFinished %s: %w", j.id, err))
		}
	}
}

// stepperWorker runs engine w under the vLLM model (stepper.go), sending
// the marks as its requests reach their first token and finish.
func (p *player) stepperWorker(w int) {
	defer p.workers.Done()
	ctx, cfg := p.ctx, p.cfg
	runStepper(ctx, cfg.Fleet.Engines[w], p.queues[w], cfg.Clock, stepHooks{
		publish: func(evs []engine.Event) {
			if err := cfg.Fleet.Engines[w].Publish(evs); err != nil {
				p.pubErrs.Add(1)
				p.noteErr(err)
			}
			p.ls.didPublish()
		},
		first: func(j *liveJob, at time.Duration) {
			j.first = at
			p.mu.Lock()
			p.res.TTFT = append(p.res.TTFT, at-j.arrival)
			p.res.PromptTokens[w] += uint64(len(j.tokens))
			if cfg.Records {
				p.res.Records = append(p.res.Records, RequestRecord{Seq: j.seq, Engine: w,
					Arrival: j.arrival, Scheduled: j.scheduled, First: at,
					PromptTokens: len(j.tokens), Prefilled: j.prefilled})
			}
			p.mu.Unlock()
			if j.routed && cfg.Router != nil {
				j.marking = true
				p.ls.markSent()
				go func() {
					defer p.inflight.Done()
					mark(ctx, cfg.Router.MarkPrefillDone, j.id, &p.markErrs, p.noteErr)
					p.ls.markAnswered()
					<-j.done // finished or dropped: either counted a mark sent
					mark(ctx, cfg.Router.MarkFinished, j.id, &p.markErrs, p.noteErr)
					p.ls.markAnswered()
				}()
			}
		},
		finished: func(j *liveJob, at time.Duration) {
			if j.output > 1 {
				p.mu.Lock()
				p.res.TPOT = append(p.res.TPOT, (at-j.first)/time.Duration(j.output-1))
				p.mu.Unlock()
			}
			if j.marking {
				p.ls.markSent()
			}
			close(j.done)
			if !j.marking {
				p.inflight.Done()
			}
		},
		dropped: func(j *liveJob, err error) { p.stepperDropped(j, err) },
		sync:    p.ls.engine(w),
	})
}

// stepperDropped ends a request the stepper could not serve; a routed one
// still gets its MarkFinished, as the router counts it as load until told.
func (p *player) stepperDropped(j *liveJob, err error) {
	ctx, router := p.ctx, p.cfg.Router
	if ctx.Err() == nil {
		p.dropped.Add(1)
		p.noteErr(err)
	}
	if j.marking {
		p.ls.markSent()
		close(j.done)
		return
	}
	close(j.done)
	if !j.routed || router == nil || ctx.Err() != nil {
		p.inflight.Done()
		return
	}
	p.ls.markSent()
	go func() {
		defer p.inflight.Done()
		mark(ctx, router.MarkFinished, j.id, &p.markErrs, p.noteErr)
		p.ls.markAnswered()
	}()
}
