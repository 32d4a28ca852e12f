// Package attack drives hostile input at a running router (over gRPC and
// ZeroMQ only, on loopback) while honest simulated engines publish and an
// honest client routes and scores, and measures what each attack costs the
// router: peak RSS growth, CPU seconds, honest Route latency, honest Score
// latency and correctness, and whether the index still equals the honest
// engines' caches afterwards.
package attack

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/stats"
)

// The bar.
const (
	MaxRSSGrowth  = 256 << 20
	MaxScoreTime  = 500 * time.Millisecond
	MaxRPCCPUTime = time.Second
)

// Config is one `kvbench attack` run.
type Config struct {
	RouterBin  string
	RouterArgs []string // appended after the suite's own flags (later flags win)
	// MaxActive and MaxWorkers are passed as --max-active-requests and
	// --max-workers, small so the floods reach them.
	MaxActive, MaxWorkers int
	Engines               int
	Model                 string
	Short                 bool
	// Only lists the attacks to run (empty: all).
	Only []string
	// Progress receives a line per phase; RouterLog the router's output.
	Progress, RouterLog io.Writer
	Seed                uint64
	// Untimed is for a test on a shared machine: latencies are measured
	// and reported but no verdict rests on them (the Score bars), and the
	// waits for the router to answer, subscribe or catch up are
	// untimedPatience times longer. Every other expectation still holds.
	Untimed bool
}

// untimedPatience stretches the harness's waits under Config.Untimed.
const untimedPatience = 6

// Result is one attack's outcome.
type Result struct {
	Name     string `json:"name"`
	What     string `json:"what"`
	Outcome  string `json:"outcome"` // what the router answered
	Duration string `json:"duration"`

	RSSBefore uint64  `json:"rss_before_bytes"`
	RSSPeak   uint64  `json:"rss_peak_bytes"`
	RSSGrowth int64   `json:"rss_growth_bytes"`
	CPUSec    float64 `json:"cpu_seconds"`
	// MaxRPCCPUSec is the router CPU spent across the costliest single
	// attack RPC, for attacks made of single RPCs measured one by one
	// (-1: not measured).
	MaxRPCCPUSec float64 `json:"max_rpc_cpu_seconds"`

	RouteP99Before time.Duration `json:"route_p99_before_ns"`
	RouteP99During time.Duration `json:"route_p99_during_ns"`
	RoutesDuring   int           `json:"routes_during"`
	ScoreCalls     int           `json:"score_calls"`
	ScoreMax       time.Duration `json:"score_max_ns"`
	ScoreSlow      int           `json:"score_slow"`
	ScoreWrong     int           `json:"score_wrong"`
	ScoreFailed    int           `json:"score_failed"`

	Exact    bool   `json:"exact_after"`
	ExactWhy string `json:"exact_why,omitempty"`

	Pass     bool     `json:"pass"`
	Failures []string `json:"failures,omitempty"`
}

// Report is a whole run.
type Report struct {
	Router  string    `json:"router_bin"`
	Args    []string  `json:"router_args"`
	Short   bool      `json:"short"`
	Started time.Time `json:"started"`
	Results []*Result `json:"results"`
}

// Passed reports whether every attack passed.
func (r *Report) Passed() bool {
	for _, x := range r.Results {
		if !x.Pass {
			return false
		}
	}
	return len(r.Results) > 0
}

// env is what an attack runs against.
type env struct {
	cfg    Config
	rt     *harness.Router
	bound  *boundLog
	fleet  *harness.Fleet
	model  string
	rng    *rand.Rand
	scale  scale
	logf   func(string, ...any)
	hostN  atomic.Int64
	rngMu  sync.Mutex
	notes  []string // what the attack checked that failed
	rpcCPU float64  // the costliest single RPC's CPU, -1 when not measured
}

// patience is how long to wait for the router where d is enough on an
// idle machine.
func (e *env) patience(d time.Duration) time.Duration {
	if e.cfg.Untimed {
		return d * untimedPatience
	}
	return d
}

// fail records an unmet expectation of the attack.
func (e *env) fail(format string, args ...any) {
	e.notes = append(e.notes, fmt.Sprintf(format, args...))
}

// scale sizes the attacks: full and --short.
type scale struct {
	baseline, settle, hold time.Duration
	attackTime             time.Duration // bound on the floods
	routes                 int
	regs, churn            int
	garbageConns           int
	truncated              int
	oversized              int
	prompts                int // sample prompts per engine
}

var fullScale = scale{baseline: 2 * time.Second, settle: time.Second, hold: 3 * time.Second, attackTime: 60 * time.Second,
	routes: 100000, regs: 20000, churn: 1000, garbageConns: 200, truncated: 1000, oversized: 20, prompts: 32}

var shortScale = scale{baseline: 500 * time.Millisecond, settle: 300 * time.Millisecond, hold: time.Second, attackTime: 4 * time.Second,
	routes: 3000, regs: 1000, churn: 100, garbageConns: 40, truncated: 100, oversized: 3, prompts: 8}

// attack is one named attack.
type attack struct {
	name, what string
	run        func(ctx context.Context, e *env) (outcome string, err error)
}

// Names lists the attacks in the order they run.
func Names() []string {
	var n []string
	for _, a := range attacks {
		n = append(n, a.name)
	}
	return n
}

// Run starts the router and the honest fleet and runs the attacks.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Engines <= 0 {
		cfg.Engines = 2
	}
	if cfg.Model == "" {
		cfg.Model = "bench-model"
	}
	if cfg.MaxActive <= 0 {
		cfg.MaxActive = 1000
	}
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = 256
	}
	for _, n := range cfg.Only {
		if !slices.Contains(Names(), n) {
			return nil, fmt.Errorf("unknown attack %q (have %v)", n, Names())
		}
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	sc := fullScale
	if cfg.Short {
		sc = shortScale
	}
	args := append([]string{"--predict=false",
		"--max-active-requests", fmt.Sprint(cfg.MaxActive), "--max-workers", fmt.Sprint(cfg.MaxWorkers)}, cfg.RouterArgs...)
	rep := &Report{Router: cfg.RouterBin, Args: args, Short: cfg.Short, Started: time.Now()}
	bound := newBoundLog(cfg.RouterLog)
	rt, err := harness.StartRouter(ctx, harness.RouterConfig{Bin: cfg.RouterBin, Args: args, Log: bound})
	if err != nil {
		return nil, err
	}
	defer rt.Stop()
	fleet, err := harness.StartFleet(harness.FleetConfig{Engines: cfg.Engines, Prefix: "honest",
		Engine: engine.Config{CapacityBlocks: 1 << 18, BlockSize: 16}})
	if err != nil {
		return nil, err
	}
	defer fleet.Close()
	wait := 10 * time.Second
	if cfg.Untimed {
		wait *= untimedPatience
	}
	if err := fleet.Register(ctx, rt.Registry, cfg.Model, wait); err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, rt: rt, bound: bound, fleet: fleet, model: cfg.Model, rng: rand.New(rand.NewPCG(cfg.Seed, 7)), scale: sc,
		logf: func(f string, a ...any) { fmt.Fprintf(progress, "attack: "+f+"\n", a...) }}
	h, err := newHonest(ctx, e)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	for _, a := range attacks {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, a.name) {
			continue
		}
		select {
		case <-rt.Exited():
			return rep, fmt.Errorf("router exited: %v", rt.ExitErr())
		default:
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		e.logf("%s: %s", a.name, a.what)
		res := e.measure(ctx, h, a)
		rep.Results = append(rep.Results, res)
		e.logf("%s: %s; %s", a.name, res.verdict(), res.Outcome)
	}
	return rep, nil
}

func (r *Result) verdict() string {
	if r.Pass {
		return "PASS"
	}
	return "FAIL"
}

// measure runs one attack between honest measurements.
// It is longer than ~80 lines: the phases around one attack share their
// samples and fill one Result in order.
func (e *env) measure(ctx context.Context, h *honest, a attack) *Result {
	res := &Result{Name: a.name, What: a.what, MaxRPCCPUSec: -1}
	e.notes, e.rpcCPU = nil, -1
	before := h.window(ctx, e.scale.baseline)
	res.RouteP99Before = before.routeP99()

	_ = e.rt.ResetPeak()
	rss0, _, _ := e.rt.Memory()
	cpu0, _ := e.rt.CPUTime()
	var sampled atomic.Uint64
	sampled.Store(rss0)
	sctx, stopSampling := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				if rss, _, err := e.rt.Memory(); err == nil && rss > sampled.Load() {
					sampled.Store(rss)
				}
			}
		}
	}()
	during := h.start(ctx)
	t0 := time.Now()
	actx, cancel := context.WithTimeout(ctx, e.scale.attackTime+e.patience(30*time.Second))
	outcome, err := a.run(actx, e)
	cancel()
	res.Duration = time.Since(t0).Round(time.Millisecond).String()
	if err != nil {
		e.fail("attack could not run: %v", err)
		outcome = "error: " + err.Error()
	}
	time.Sleep(e.scale.settle) // the router's after-effects still count
	dw := during()
	stopSampling()
	_, hwm, _ := e.rt.Memory()
	cpu1, _ := e.rt.CPUTime()
	res.Outcome = outcome
	res.RSSBefore = rss0
	res.RSSPeak = max(hwm, sampled.Load())
	res.RSSGrowth = int64(res.RSSPeak) - int64(rss0)
	res.CPUSec = (cpu1 - cpu0).Seconds()
	res.MaxRPCCPUSec = e.rpcCPU
	res.RouteP99During = dw.routeP99()
	res.RoutesDuring = len(dw.routes)
	res.ScoreCalls, res.ScoreMax, res.ScoreSlow, res.ScoreWrong, res.ScoreFailed = dw.scores, dw.scoreMax, dw.slow, dw.wrong, dw.failed

	// Exactness: pause the honest publisher, compare with the engines' caches.
	c, err := h.exact(ctx, e.patience(10*time.Second))
	switch {
	case err != nil:
		res.ExactWhy = err.Error()
	case c != nil:
		res.Exact, res.ExactWhy = exactWhy(c)
	}
	// And an honest Score after the attack, from a quiet router.
	aw := h.window(ctx, e.scale.settle)
	res.ScoreCalls += aw.scores
	res.ScoreMax = max(res.ScoreMax, aw.scoreMax)
	res.ScoreSlow += aw.slow
	res.ScoreWrong += aw.wrong
	res.ScoreFailed += aw.failed

	f := e.notes
	if res.RSSGrowth >= MaxRSSGrowth {
		f = append(f, fmt.Sprintf("peak RSS grew %s (bar %s)", Bytes(res.RSSGrowth), Bytes(MaxRSSGrowth)))
	}
	if res.ScoreCalls == 0 {
		f = append(f, "no honest Score answered")
	}
	slow := res.ScoreSlow
	if e.cfg.Untimed {
		slow = 0 // counted and reported, not judged
	}
	if slow+res.ScoreWrong+res.ScoreFailed > 0 {
		f = append(f, fmt.Sprintf("honest Score: %d slow (> %v, max %v), %d wrong, %d failed of %d (first: %s)",
			res.ScoreSlow, MaxScoreTime, res.ScoreMax.Round(time.Millisecond), res.ScoreWrong, res.ScoreFailed, res.ScoreCalls, firstOf(dw.first, aw.first)))
	}
	if res.MaxRPCCPUSec >= MaxRPCCPUTime.Seconds() {
		f = append(f, fmt.Sprintf("one RPC cost %.2f s of router CPU", res.MaxRPCCPUSec))
	}
	if !res.Exact {
		f = append(f, "index not exact after: "+res.ExactWhy)
	}
	res.Failures = f
	res.Pass = len(f) == 0
	return res
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func exactWhy(c *replay.ExactCheck) (bool, string) {
	var why []string
	if c.ScoreErr != "" {
		why = append(why, "Score: "+c.ScoreErr)
	}
	why = append(why, c.Registry...)
	for i := range c.Ranks {
		if !c.Ranks[i].Exact() {
			why = append(why, c.Ranks[i].Worker+": "+c.Ranks[i].Reason())
		}
	}
	if len(why) == 0 {
		return true, ""
	}
	if len(why) > 3 {
		why = append(why[:3], fmt.Sprintf("(%d more)", len(why)-3))
	}
	return false, fmt.Sprint(why)
}

// Bytes formats a byte count.
func Bytes(n int64) string {
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%s%.2f GiB", sign, float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%s%.1f MiB", sign, float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%s%d KiB", sign, n>>10)
	}
}

// honest is the honest side: engines publishing new prompts now and then,
// and a client routing and scoring the sample prompts, whose answers are
// known (the engines never evict: their caches outsize the run).
type honest struct {
	e       *env
	prompts [][]uint32
	from    []int
	matched [][]int    // matched[p][engine]: fixed, since no engine evicts
	pubMu   sync.Mutex // held to pause publishing
	cancel  context.CancelFunc
	done    chan struct{}
	sim     time.Duration
}

func (e *env) randPrompt(minTok, maxTok int) []uint32 {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	n := minTok + e.rng.IntN(maxTok-minTok+1)
	p := make([]uint32, n)
	for i := range p {
		p[i] = e.rng.Uint32N(50000)
	}
	return p
}

func newHonest(ctx context.Context, e *env) (*honest, error) {
	h := &honest{e: e, done: make(chan struct{})}
	for i, eng := range e.fleet.Engines {
		for j := 0; j < e.scale.prompts; j++ {
			p := e.randPrompt(256, 1024)
			h.sim += time.Millisecond
			if _, err := eng.ServeAndPublish(engine.Request{Tokens: p, OutputTokens: 1, Arrival: h.sim}); err != nil {
				return nil, err
			}
			h.prompts = append(h.prompts, p)
			h.from = append(h.from, i)
		}
	}
	truth := replay.TakeTruth(e.fleet, h.prompts, h.from)
	h.matched = truth.Matched
	c, err := h.poll(ctx, truth, h.e.patience(15*time.Second))
	if err != nil {
		return nil, err
	}
	if ok, why := exactWhy(c); !ok {
		return nil, fmt.Errorf("the router's index never matched the honest engines before any attack: %s", why)
	}
	pctx, cancel := context.WithCancel(ctx)
	h.cancel = cancel
	go h.publish(pctx)
	return h, nil
}

// publish serves a fresh prompt on a random engine every 100 ms.
func (h *honest) publish(ctx context.Context) {
	defer close(h.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p := h.e.randPrompt(64, 512)
		h.pubMu.Lock()
		h.sim += time.Millisecond
		eng := h.e.fleet.Engines[i%len(h.e.fleet.Engines)]
		_, _ = eng.ServeAndPublish(engine.Request{Tokens: p, OutputTokens: 1, Arrival: h.sim})
		h.pubMu.Unlock()
	}
}

func (h *honest) stop() {
	if h.cancel != nil {
		h.cancel()
		<-h.done
	}
}

// exact pauses publishing and polls CheckExact until it is exact or timeout.
func (h *honest) exact(ctx context.Context, timeout time.Duration) (*replay.ExactCheck, error) {
	h.pubMu.Lock()
	defer h.pubMu.Unlock()
	return h.poll(ctx, replay.TakeTruth(h.e.fleet, h.prompts, h.from), timeout)
}

func (h *honest) poll(ctx context.Context, truth *replay.Truth, timeout time.Duration) (*replay.ExactCheck, error) {
	deadline := time.Now().Add(timeout)
	for {
		c, err := replay.CheckExact(ctx, replay.CheckConfig{Fleet: h.e.fleet, Registry: h.e.rt.Registry, Router: h.e.rt.Router,
			Model: h.e.model, Truth: truth, ScoreIf: func(r []replay.RankCheck) bool {
				for i := range r {
					if !r[i].CountsAgree() {
						return false
					}
				}
				return true
			}})
		if err == nil {
			if ok, _ := exactWhy(c); ok || time.Now().After(deadline) {
				return c, nil
			}
		} else if time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// window is what the honest client saw over a span.
type window struct {
	routes              []time.Duration
	scores              int
	scoreMax            time.Duration
	slow, wrong, failed int
	first               string
}

func (w *window) routeP99() time.Duration {
	if len(w.routes) == 0 {
		return 0
	}
	d := slices.Clone(w.routes)
	slices.Sort(d)
	return stats.Percentile(d, 99)
}

// window runs the honest client for d.
func (h *honest) window(ctx context.Context, d time.Duration) *window {
	stop := h.start(ctx)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return stop()
}

// start runs the honest client (a Route and a Score of a sample prompt every
// 20 ms) until the returned function is called.
func (h *honest) start(ctx context.Context) func() *window {
	cctx, cancel := context.WithCancel(ctx)
	w := &window{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; cctx.Err() == nil; i++ {
			p := i % len(h.prompts)
			prompt := &kvrouterv1.Prompt{Model: h.e.model, TokenIds: h.prompts[p]}
			rctx, rc := context.WithTimeout(cctx, h.e.patience(5*time.Second))
			t := time.Now()
			_, err := h.e.rt.Router.Route(rctx, &kvrouterv1.RouteRequest{Prompt: prompt, MaxCandidates: 1})
			rc()
			if cctx.Err() != nil {
				break
			}
			lat := time.Since(t)
			if err != nil {
				lat = 5 * time.Second // a failed Route counts as the slowest
			}
			w.routes = append(w.routes, lat)
			sctx, sc := context.WithTimeout(cctx, h.e.patience(5*time.Second))
			t = time.Now()
			resp, err := h.e.rt.Router.Score(sctx, &kvrouterv1.ScoreRequest{Prompt: prompt})
			sc()
			if cctx.Err() != nil {
				break
			}
			lat = time.Since(t)
			w.scores++
			w.scoreMax = max(w.scoreMax, lat)
			switch {
			case err != nil:
				w.failed++
				if w.first == "" {
					w.first = "Score: " + err.Error()
				}
			default:
				if lat >= MaxScoreTime {
					w.slow++
					if w.first == "" {
						w.first = fmt.Sprintf("Score took %v", lat.Round(time.Millisecond))
					}
				}
				if why := h.check(p, resp); why != "" {
					w.wrong++
					if w.first == "" {
						w.first = why
					}
				}
			}
			select {
			case <-cctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() *window {
		cancel()
		<-done
		return w
	}
}

// check compares a Score answer for sample prompt p with the engines.
func (h *honest) check(p int, resp *kvrouterv1.ScoreResponse) string {
	got := map[string]uint32{}
	for _, s := range resp.GetScores() {
		if s.DpRank == 0 {
			got[s.WorkerId] = s.MatchedBlocks
		}
	}
	for i, eng := range h.e.fleet.Engines {
		want := h.matched[p][i]
		if int(got[eng.ID()]) != want {
			return fmt.Sprintf("Score of a prompt of %s: %s matched %d blocks, engine holds %d",
				h.e.fleet.Engines[h.from[p]].ID(), eng.ID(), got[eng.ID()], want)
		}
	}
	return ""
}
