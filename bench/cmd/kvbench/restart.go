package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/trace"
)

// restartConfig is one `kvbench restart` run: a trace replayed into simulated
// engines, the router killed with SIGKILL at a random point, the engines
// publishing on while it is down, the router restarted on its state
// directory, and its index compared with the engines' caches.
type restartConfig struct {
	trace       string
	limit       int
	idTokens    int
	engines     int
	capacity    int
	buffer      int           // replay buffer of every engine but the short one, in batches
	shortBuffer int           // replay buffer of engine 0 (0: no short engine)
	speedUp     float64       // trace time / wall time
	seed        uint64        // kill point, fallback choices, samples
	killMin     time.Duration // kill -9 uniformly in [killMin, killMax] after the replay starts
	killMax     time.Duration
	downtime    time.Duration // engines publish this long with the router down
	after       time.Duration // live replay after the catch-up check, before the final one
	snapshot    time.Duration // --snapshot-interval
	timeout     time.Duration // bound on restart -> exact (and on the final check)
	samples     int           // Score prompts per engine
	policy      string        // route or random
	routerBin   string
	routerArgs  []string
	stateDir    string // "" : a fresh temporary directory
	noState     bool   // no --state-dir / --snapshot-interval (routers without persistence)
	reregister  bool   // register the fleet again after the restart
	restartEng  bool   // engine-01 restarts halfway through the downtime
	keep        bool
	workRoot    string // parent of the work directory ("": the system's temp dir)
	model       string
	format      engine.Format
}

// shortRestart is --short: four engines, about 20 s in all.
var shortRestart = map[string]string{
	"engines": "4", "capacity": "2048", "kill-min": "3s", "kill-max": "5s", "downtime": "2s",
	"after": "2s", "snapshot-interval": "1s", "exact-timeout": "15s", "samples": "50",
}

func parseRestart(args []string) (restartConfig, error) {
	fs := flag.NewFlagSet("kvbench restart", flag.ContinueOnError)
	var (
		c         restartConfig
		routerArg string
		format    string
		short     bool
	)
	fs.StringVar(&c.trace, "trace", defaultTrace, "Mooncake JSONL trace (the embedded 300-request demo slice when the file is missing)")
	fs.IntVar(&c.limit, "limit", 0, "use at most this many requests of the trace (0: all); the schedule repeats it as needed")
	idTokens := traceBlockTokens(fs)
	fs.IntVar(&c.engines, "engines", 8, "simulated engines (one rank each)")
	fs.IntVar(&c.capacity, "capacity", 4096, "cache capacity per engine, in 16-token blocks")
	fs.IntVar(&c.buffer, "replay-buffer", 10000, "replay buffer of each engine, in batches")
	fs.IntVar(&c.shortBuffer, "short-buffer", 16, "replay buffer of engine-00, in batches, meant too short to cover the downtime (0: every engine gets --replay-buffer)")
	fs.Float64Var(&c.speedUp, "speed-up", 30, "replay speed-up over trace time")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the kill point, the fallback choices and the Score samples")
	fs.DurationVar(&c.killMin, "kill-min", 5*time.Second, "earliest kill -9 after the replay starts")
	fs.DurationVar(&c.killMax, "kill-max", 15*time.Second, "latest kill -9 after the replay starts")
	fs.DurationVar(&c.downtime, "downtime", 3*time.Second, "how long the engines publish with the router down")
	fs.DurationVar(&c.after, "after", 5*time.Second, "live replay after the catch-up check, then a final check (0: none)")
	fs.DurationVar(&c.snapshot, "snapshot-interval", 2*time.Second, "router --snapshot-interval")
	fs.DurationVar(&c.timeout, "exact-timeout", 30*time.Second, "how long after the restart the index may take to become exact")
	fs.IntVar(&c.samples, "samples", 200, "cached prompts per engine whose Score is checked for every rank")
	fs.StringVar(&c.policy, "policy", "random", "who places requests while the router is up: random (seeded, every engine gets traffic) or route (Route without request_id: by overlap alone, so a few engines take most); random while it is down")
	fs.StringVar(&c.routerBin, "router-bin", "bin/kvrouter", "router binary")
	fs.StringVar(&routerArg, "router-args", "", "extra router flags, space-separated")
	fs.StringVar(&c.stateDir, "state-dir", "", "router --state-dir (empty: a fresh temporary directory)")
	fs.BoolVar(&c.noState, "no-state", false, "run the router without a state directory (--state-dir none, or no flag for a router without one) to see what a restart loses")
	fs.BoolVar(&c.reregister, "reregister", false, "register the fleet again after the restart, as an operator must without a durable registry (a baseline: the engines replay whatever their buffers hold)")
	fs.BoolVar(&c.restartEng, "restart-engine", false, "engine-01 restarts halfway through the downtime (new process: seq from 0, empty cache, same addresses); its rank must come back \"reset\" and exact")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory (state dir, router logs) even when the run passes")
	fs.StringVar(&c.model, "model", "bench-model", "model name the engines serve")
	fs.StringVar(&format, "format", "vllm-map", "event wire format: vllm-map, vllm-array or sglang")
	fs.BoolVar(&short, "short", false, "CI size: 4 engines, kill at 3-5 s, 2 s down, 2 s live after, 1 s snapshots, 50 samples (flags given explicitly win)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range shortRestart {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return c, err
				}
			}
		}
	}
	c.idTokens = *idTokens
	c.routerArgs = strings.Fields(routerArg)
	var err error
	if c.format, err = engine.ParseFormat(format); err != nil {
		return c, err
	}
	switch {
	case c.engines < 1:
		return c, fmt.Errorf("--engines %d: want at least 1", c.engines)
	case c.capacity < 1 || c.buffer < 1 || c.shortBuffer < 0 || c.samples < 0:
		return c, errors.New("--capacity and --replay-buffer must be positive, --short-buffer and --samples not negative")
	case c.speedUp <= 0:
		return c, fmt.Errorf("--speed-up %v: want positive", c.speedUp)
	case c.killMin <= 0 || c.killMax < c.killMin:
		return c, fmt.Errorf("kill window %v..%v: want 0 < kill-min <= kill-max", c.killMin, c.killMax)
	case c.downtime < 0 || c.after < 0 || c.snapshot <= 0 || c.timeout <= 0:
		return c, errors.New("--downtime and --after must not be negative, --snapshot-interval and --exact-timeout positive")
	case c.restartEng && c.engines < 2:
		return c, errors.New("--restart-engine restarts engine-01: want at least 2 engines")
	case c.policy != "route" && c.policy != "random":
		return c, fmt.Errorf("--policy %q: want route or random", c.policy)
	}
	return c, nil
}

func runRestart(ctx context.Context, args []string) error {
	cfg, err := parseRestart(args)
	if err != nil {
		return err
	}
	res, err := restartScenario(ctx, cfg, os.Stdout, os.Stderr)
	if err != nil {
		return err
	}
	if len(res.Failures) > 0 {
		return fmt.Errorf("restart: %d check(s) failed", len(res.Failures))
	}
	return nil
}

// restartResult is what a run measured and concluded.
type restartResult struct {
	KillAt, Downtime time.Duration
	// ToServing is restart -> health SERVING; NotServing is how long health
	// said NOT_SERVING before that (0: never seen).
	ToServing, NotServing time.Duration
	Serving               bool
	// ToExact is restart -> the start of the first check that found the
	// registry whole and every rank that must be exact exact (Exact: one did).
	ToExact time.Duration
	Exact   bool
	// Restore counts listed ranks per restore outcome ("": none).
	Restore map[string]int
	// CatchUp is the check after the restart (the first exact one, else the
	// last), Final the one after --after of live events (nil without).
	CatchUp, Final *replay.ExactCheck
	FinalExact     time.Duration // end of live replay -> exact (FinalOK: reached)
	FinalOK        bool
	Expect         []rankExpect
	Failures       []string
}

// rankExpect is what one rank's restore must be, from its engine's seqs: the
// router must replay at least every batch published while it was down (Down)
// and at most those since two snapshot intervals before the kill (Window), or
// at worst the engine's whole history (Total). A Reset engine restarted
// while the router was down (its counts are then of the new process). A
// Fresh one had published nothing two snapshot intervals before the kill, so
// the last snapshot may hold no position for its rank to restore: the router
// then follows it from seq 0 and may report no outcome ("").
type rankExpect struct {
	Buffer              int
	Down, Window, Total uint64
	Reset, Fresh        bool
}

// mustRestore: the buffer covers every batch the router can be missing.
func (x rankExpect) mustRestore() bool {
	return x.Window <= uint64(x.Buffer) || x.Total <= uint64(x.Buffer)
}

// mustRebuild: the buffer lost batches the router never saw.
func (x rankExpect) mustRebuild() bool { return x.Down > uint64(x.Buffer) }

// want lists the right restore outcomes and says why.
func (x rankExpect) want() ([]string, string) {
	w, why := x.wantStream()
	if x.Fresh && !x.Reset {
		w = append(w, "")
		why += " (or none: it had published nothing as of the last snapshot)"
	}
	return w, why
}

func (x rankExpect) wantStream() ([]string, string) {
	switch {
	case x.Reset:
		return []string{replay.RestoreReset}, "its engine restarted while the router was down"
	case x.mustRestore():
		return []string{replay.RestoreRestored}, fmt.Sprintf("its buffer of %d batches holds the %d it can be missing", x.Buffer, min(x.Window, x.Total))
	case x.mustRebuild():
		return []string{replay.RestoreRebuilt}, fmt.Sprintf("%d batches were published while the router was down, its buffer holds %d", x.Down, x.Buffer)
	}
	return []string{replay.RestoreRestored, replay.RestoreRebuilt}, fmt.Sprintf("its buffer of %d batches may or may not reach the snapshot", x.Buffer)
}

// mustExact: the rank must match its engine, given its restore outcome: a
// reset rank follows the new process from its start, a restored one lost
// nothing; an ambiguous rank counts as restored until the router says not.
func (x rankExpect) mustExact(restore string) bool {
	if x.Reset || x.mustRestore() {
		return true
	}
	return !x.mustRebuild() && (restore == "" || restore == replay.RestoreRestored)
}

func (x rankExpect) String() string {
	w, _ := x.want()
	if i := slices.Index(w, ""); i >= 0 {
		w[i] = "none"
	}
	return strings.Join(w, "|")
}

// restartRun holds a run's moving parts.
type restartRun struct {
	cfg      restartConfig
	out      io.Writer
	logf     func(string, ...any)
	fleet    *replay.Fleet
	sched    []trace.Request
	orig     []int // sched[i] is the trace's request orig[i]
	workDir  string
	stateDir string
	args     []string
	grpcAddr string
	httpAddr string

	live     atomic.Pointer[replay.Router] // nil while the router is down
	mu       sync.Mutex
	served   [][]int // per engine, schedule indices it served
	routed   atomic.Int64
	fallback atomic.Int64
	routeErr atomic.Int64
}

func restartScenario(ctx context.Context, cfg restartConfig, out, progress io.Writer) (*restartResult, error) {
	r := &restartRun{cfg: cfg, out: out, served: make([][]int, cfg.engines)}
	r.logf = func(format string, a ...any) {
		fmt.Fprintf(progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, a...)...)
	}
	path := findTrace(cfg.trace)
	reqs, err := loadDemoTrace(path, cfg.limit, cfg.idTokens, slog.New(slog.NewTextHandler(progress, nil)))
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, errors.New("restart: empty trace")
	}
	if _, err := os.Stat(path); err != nil {
		path = "embedded demo slice"
	}
	// Enough trace for the kill window, the downtime and the live replay after.
	r.sched, r.orig = repeatTrace(reqs, simOf(cfg.killMax+cfg.downtime+cfg.after+5*time.Second, cfg.speedUp))

	if r.workDir, err = os.MkdirTemp(cfg.workRoot, "kvbench-restart-"); err != nil {
		return nil, err
	}
	passed := false
	defer func() {
		if passed && !cfg.keep {
			os.RemoveAll(r.workDir)
		} else {
			fmt.Fprintf(out, "work directory kept: %s\n", r.workDir)
		}
	}()
	r.stateDir = cfg.stateDir
	if r.stateDir == "" {
		r.stateDir = filepath.Join(r.workDir, "state")
		if err := os.Mkdir(r.stateDir, 0o700); err != nil {
			return nil, err
		}
	}
	r.args = append([]string{"--predict=false"}, cfg.routerArgs...)
	switch {
	case !cfg.noState:
		r.args = append(r.args, "--state-dir", r.stateDir, "--snapshot-interval", cfg.snapshot.String())
	case routerHasFlag(cfg.routerBin, "state-dir"):
		r.args = append(r.args, "--state-dir", "none") // persistence is on by default
	}

	r.fleet, err = replay.StartFleet(replay.FleetConfig{
		Engines: cfg.engines, Replay: true,
		Engine: engine.Config{CapacityBlocks: cfg.capacity, Format: cfg.format, ReplayBuffer: cfg.buffer},
		Configure: func(i int, c *engine.Config) {
			if i == 0 && cfg.shortBuffer > 0 {
				c.ReplayBuffer = cfg.shortBuffer
			}
		},
	})
	if err != nil {
		return nil, err
	}
	defer r.fleet.Close()
	buf := fmt.Sprintf("replay buffer %d batches", cfg.buffer)
	if cfg.shortBuffer > 0 {
		buf = fmt.Sprintf("engine-00's replay buffer %d batches, the others' %d", cfg.shortBuffer, cfg.buffer)
	}
	fmt.Fprintf(out, "kvbench restart: %d engines x %d blocks, %s; trace %s (%d requests), speed-up %gx, seed %d\n",
		cfg.engines, cfg.capacity, buf, path, len(reqs), cfg.speedUp, cfg.seed)
	fmt.Fprintf(out, "router: %s %s\n", cfg.routerBin, strings.Join(r.args, " "))

	res, err := r.run(ctx)
	if err != nil {
		return nil, err
	}
	r.report(res)
	passed = len(res.Failures) == 0
	return res, nil
}

// routerHasFlag reports whether the router binary's -h lists --name.
func routerHasFlag(bin, name string) bool {
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	return bytes.Contains(out, []byte("-"+name+" "))
}

// simOf is the trace time that wall time d stands for.
func simOf(d time.Duration, speedUp float64) time.Duration {
	return time.Duration(float64(d) * speedUp)
}

// repeatTrace plays reqs again and again (each pass after the last one's
// span plus a mean gap) until arrivals reach until.
func repeatTrace(reqs []trace.Request, until time.Duration) ([]trace.Request, []int) {
	span := reqs[len(reqs)-1].Arrival - reqs[0].Arrival
	gap := time.Second
	if len(reqs) > 1 {
		gap = max(span/time.Duration(len(reqs)-1), time.Millisecond)
	}
	var (
		sched []trace.Request
		orig  []int
	)
	for pass := time.Duration(0); ; pass++ {
		for i, q := range reqs {
			q.Arrival = q.Arrival - reqs[0].Arrival + pass*(span+gap)
			if q.Arrival > until {
				return sched, orig
			}
			sched, orig = append(sched, q), append(orig, i)
		}
	}
}

// choose places request base+seq: with Route while the router is up (policy
// route), else a seeded random engine. It never fails, so Play never falls
// back, and it records who served what for the Score samples.
func (r *restartRun) choose(base int) replay.ChooseFunc {
	n := len(r.fleet.Engines)
	return func(ctx context.Context, seq int, tokens []uint32, _ string) (replay.Choice, error) {
		i, e := base+seq, -1
		if rt := r.live.Load(); rt != nil && r.cfg.policy == "route" {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err := rt.Router.Route(rctx, &kvrouterv1.RouteRequest{
				Prompt: &kvrouterv1.Prompt{Model: r.cfg.model, TokenIds: tokens}, MaxCandidates: 1,
			})
			cancel()
			if j, ok := r.fleet.Index(resp.GetWorkerId()); err == nil && ok {
				e = j
				r.routed.Add(1)
			} else if r.live.Load() != nil {
				r.routeErr.Add(1)
			}
		}
		if e < 0 {
			e = rand.New(rand.NewPCG(r.cfg.seed, uint64(i))).IntN(n)
			r.fallback.Add(1)
		}
		r.mu.Lock()
		r.served[e] = append(r.served[e], i)
		r.mu.Unlock()
		return replay.Choice{Engine: e}, nil
	}
}

func (r *restartRun) seqs() []uint64 {
	s := make([]uint64, len(r.fleet.Engines))
	for i, e := range r.fleet.Engines {
		s[i] = e.Publisher().Seq()
	}
	return s
}

// launch starts a router on the run's state dir (and, after the first, on
// the first one's addresses), logging to router-N.log in the work dir.
func (r *restartRun) launch(n int) (*replay.Router, string, error) {
	logPath := filepath.Join(r.workDir, fmt.Sprintf("router-%d.log", n))
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	// The router owns the file through its stdout/stderr; closing our handle
	// once the process has it open is safe.
	defer lf.Close()
	rt, err := replay.LaunchRouter(replay.RouterConfig{
		Bin: r.cfg.routerBin, GRPCAddr: r.grpcAddr, HTTPAddr: r.httpAddr, Args: r.args, Log: lf,
	})
	if err != nil {
		return nil, logPath, err
	}
	r.grpcAddr, r.httpAddr = rt.GRPCAddr, rt.HTTPAddr
	return rt, logPath, nil
}

// logTail is the last lines of a router log, for an error message.
func logTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return "\n  " + strings.Join(l, "\n  ")
}

func (r *restartRun) run(ctx context.Context) (*restartResult, error) {
	cfg := r.cfg
	res := &restartResult{Restore: map[string]int{}}

	// First router: register the fleet over gRPC, so the registry must survive.
	first, log1, err := r.launch(1)
	if err != nil {
		return nil, err
	}
	defer first.Stop()
	if err := first.WaitAnswering(ctx, 20*time.Second); err != nil {
		return nil, fmt.Errorf("first router: %w%s", err, logTail(log1, 10))
	}
	if err := r.fleet.Register(ctx, first.Registry, cfg.model, 20*time.Second); err != nil {
		return nil, err
	}
	r.live.Store(first)
	r.logf("router pid %d on %s; %d engines registered and subscribed", first.PID(), r.grpcAddr, cfg.engines)

	// Phase 1: replay; kill -9 at a seeded random point; engines go on for the downtime.
	rng := rand.New(rand.NewPCG(cfg.seed, 0x6b696c6c))
	res.KillAt = cfg.killMin + time.Duration(rng.Int64N(int64(cfg.killMax-cfg.killMin)+1))
	end1 := simOf(res.KillAt+cfg.downtime, cfg.speedUp)
	k := sort.Search(len(r.sched), func(i int) bool { return r.sched[i].Arrival > end1 })
	clock := replay.Clock{T0: time.Now(), SpeedUp: cfg.speedUp}

	type seqSample struct {
		at   time.Time
		seqs []uint64
	}
	var (
		samples  []seqSample
		seqKill  []uint64
		killTime time.Time
		killErr  error
	)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // engine seqs every 50 ms, to bound what the last snapshot saw
		defer close(sampled)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			samples = append(samples, seqSample{time.Now(), r.seqs()})
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
		}
	}()
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		tm := time.NewTimer(time.Until(clock.T0.Add(res.KillAt)))
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			killErr = ctx.Err()
			return
		}
		r.live.Store(nil)
		seqKill, killTime = r.seqs(), time.Now()
		killErr = first.Kill()
		r.logf("kill -9 router pid %d at %.2fs of replay; engines keep publishing for %v", first.PID(), res.KillAt.Seconds(), cfg.downtime)
	}()
	r.logf("replaying %d requests (%v of trace time) over %v; kill -9 at %.2fs", k, end1.Truncate(time.Second),
		(res.KillAt + cfg.downtime).Round(time.Millisecond), res.KillAt.Seconds())
	// With --restart-engine the replay pauses halfway through the downtime
	// (every request before is published) while engine-01 restarts.
	segments := [][2]int{{0, k}}
	if cfg.restartEng {
		kr := sort.Search(k, func(i int) bool { return r.sched[i].Arrival > simOf(res.KillAt+cfg.downtime/2, cfg.speedUp) })
		segments = [][2]int{{0, kr}, {kr, k}}
	}
	playStart := time.Now()
	for si, seg := range segments {
		if si == 1 {
			<-killed
			if err := r.fleet.Engines[1].Restart(); err != nil {
				return nil, err
			}
			r.logf("engine-01 restarted (new process: seq from 0, empty cache)")
		}
		pr, err := replay.Play(ctx, replay.PlayConfig{Fleet: r.fleet, Requests: r.sched[seg[0]:seg[1]], Clock: clock, Choose: r.choose(seg[0])})
		if err != nil {
			return nil, err
		}
		if pr.PublishErrs > 0 {
			return nil, fmt.Errorf("engines failed to publish %d batches: %s", pr.PublishErrs, pr.FirstError)
		}
	}
	playWall := time.Since(playStart)
	<-killed
	close(stopSampling)
	<-sampled
	if killErr != nil {
		return nil, fmt.Errorf("kill: %w", killErr)
	}
	seqDown := r.seqs()
	before := killTime.Add(-2 * cfg.snapshot)
	seqBefore := make([]uint64, len(seqDown))
	for _, s := range samples {
		if !s.at.After(before) {
			seqBefore = s.seqs
		}
	}
	res.Expect = make([]rankExpect, cfg.engines)
	for i := range res.Expect {
		b := cfg.buffer
		if i == 0 && cfg.shortBuffer > 0 {
			b = cfg.shortBuffer
		}
		if cfg.restartEng && i == 1 { // the new process's stream
			res.Expect[i] = rankExpect{Buffer: b, Down: seqDown[i], Window: seqDown[i], Total: seqDown[i], Reset: true}
			continue
		}
		res.Expect[i] = rankExpect{Buffer: b, Down: seqDown[i] - seqKill[i], Window: seqDown[i] - seqBefore[i], Total: seqDown[i], Fresh: seqBefore[i] == 0}
	}
	var downBatches uint64
	for _, x := range res.Expect {
		downBatches += x.Down
	}

	// The engines are quiet now: take the truth before the restart, so
	// restart -> exact is the router's time alone.
	truth := r.truth(rand.New(rand.NewPCG(cfg.seed, 1)))
	fmt.Fprintf(r.out, "replay: %d requests in %.1fs; kill -9 at %.2fs (pid %d); %d batches published while down\n",
		k, playWall.Seconds(), res.KillAt.Seconds(), first.PID(), downBatches)
	fmt.Fprintf(r.out, "state dir at restart: %s\n", listDir(r.stateDir))

	// Restart on the same state dir and addresses; time SERVING and exact.
	second, log2, err := r.launch(2)
	if err != nil {
		return nil, err
	}
	defer second.Stop()
	res.Downtime = second.Started.Sub(killTime)
	r.logf("router restarted (pid %d) after %v down", second.PID(), res.Downtime.Round(time.Millisecond))
	if err := r.waitServing(ctx, second, res); err != nil {
		return nil, fmt.Errorf("%w%s", err, logTail(log2, 10))
	}
	if cfg.reregister {
		for _, e := range r.fleet.Engines { // as Fleet.Register, without waiting for subscribers
			w := &kvrouterv1.Worker{WorkerId: e.ID(), Model: cfg.model, Endpoint: "sim://" + e.ID(),
				KvEventsEndpoint: e.Endpoint(), ReplayEndpoint: e.ReplayEndpoint(), DpSize: 1, BlockSize: 16}
			if _, err := second.Registry.RegisterWorker(ctx, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
				return nil, fmt.Errorf("register %s again: %w", e.ID(), err)
			}
		}
	}
	r.live.Store(second)
	catchUpMust := func(i int, rc *replay.RankCheck) bool { return res.Expect[i].mustExact(rc.Restore) }
	res.CatchUp, res.ToExact, res.Exact, err = r.pollExact(ctx, second, truth, catchUpMust, second.Started, true)
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, logTail(log2, 10))
	}
	for _, rc := range res.CatchUp.Ranks {
		if rc.Listed {
			res.Restore[rc.Restore]++
		}
	}

	// Phase 2: live events on the restored router, then a final check.
	if cfg.after > 0 && len(res.CatchUp.Registry) == 0 {
		if err := r.waitSubscribed(ctx, 5*time.Second); err != nil {
			res.Failures = append(res.Failures, err.Error())
		} else if k < len(r.sched) {
			start := r.sched[k].Arrival
			end2 := start + simOf(cfg.after, cfg.speedUp)
			k2 := sort.Search(len(r.sched), func(i int) bool { return r.sched[i].Arrival > end2 })
			clock2 := replay.Clock{T0: time.Now().Add(-time.Duration(float64(start) / cfg.speedUp)), SpeedUp: cfg.speedUp}
			r.logf("live replay of %d requests for %v", k2-k, cfg.after)
			if _, err := replay.Play(ctx, replay.PlayConfig{Fleet: r.fleet, Requests: r.sched[k:k2], Clock: clock2, Choose: r.choose(k)}); err != nil {
				return nil, err
			}
			truth2 := r.truth(rand.New(rand.NewPCG(cfg.seed, 2)))
			t2 := time.Now()
			finalMust := func(i int, _ *replay.RankCheck) bool { return finalMustExact(res, i) }
			res.Final, res.FinalExact, res.FinalOK, err = r.pollExact(ctx, second, truth2, finalMust, t2, false)
			if err != nil {
				return nil, fmt.Errorf("%w%s", err, logTail(log2, 10))
			}
		}
	}
	r.verdict(res)
	return res, nil
}

// waitServing polls grpc.health.v1 until SERVING, noting NOT_SERVING.
func (r *restartRun) waitServing(ctx context.Context, rt *replay.Router, res *restartResult) error {
	deadline := rt.Started.Add(r.cfg.timeout)
	var firstNot time.Time
	for {
		st, err := rt.Health(ctx)
		now := time.Now()
		if err == nil && st == healthpb.HealthCheckResponse_SERVING {
			res.Serving, res.ToServing = true, now.Sub(rt.Started)
			if !firstNot.IsZero() {
				res.NotServing = now.Sub(firstNot)
			}
			r.logf("health SERVING %v after the restart", res.ToServing.Round(time.Millisecond))
			return nil
		}
		if err == nil && firstNot.IsZero() {
			firstNot = now
		}
		select {
		case <-rt.Exited():
			return fmt.Errorf("restarted router exited: %v", rt.ExitErr())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if now.After(deadline) {
			return fmt.Errorf("restarted router not SERVING within %v (last: %v %v)", r.cfg.timeout, st, err)
		}
	}
}

func (r *restartRun) waitSubscribed(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, e := range r.fleet.Engines {
		for !e.Publisher().Subscribed() {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: the restarted router did not subscribe within %v", e.ID(), timeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

// truth samples up to cfg.samples prompts per engine among those it served
// that it still holds at least a block of, and reads every engine's truth.
func (r *restartRun) truth(rng *rand.Rand) *replay.Truth {
	var (
		prompts [][]uint32
		from    []int
		h       []uint64
	)
	r.mu.Lock()
	defer r.mu.Unlock()
	for ei, e := range r.fleet.Engines {
		seen := map[int]bool{}
		var cand []int
		for _, i := range r.served[ei] {
			if !seen[r.orig[i]] {
				seen[r.orig[i]] = true
				cand = append(cand, i)
			}
		}
		rng.Shuffle(len(cand), func(a, b int) { cand[a], cand[b] = cand[b], cand[a] })
		got := 0
		for tries := 0; tries < len(cand) && got < r.cfg.samples && tries < 20*r.cfg.samples; tries++ {
			toks := r.sched[cand[tries]].Tokens(nil)
			h = e.BlockHashes(toks, h[:0])
			if e.Overlap(h) > 0 {
				prompts, from = append(prompts, toks), append(from, ei)
				got++
			}
		}
	}
	return replay.TakeTruth(r.fleet, prompts, from)
}

// pollExact checks the router against truth until the registry is whole and
// every rank that must be exact is, then (catch-up only) a little longer for
// every rank's restore outcome, or until the timeout. It returns the first
// exact check and the time from since to it, else the last check and false.
func (r *restartRun) pollExact(ctx context.Context, rt *replay.Router, truth *replay.Truth, must func(int, *replay.RankCheck) bool, since time.Time, catchUp bool) (*replay.ExactCheck, time.Duration, bool, error) {
	exact := func(c *replay.ExactCheck) bool {
		if len(c.Registry) > 0 {
			return false
		}
		for i := range c.Ranks {
			if must(i, &c.Ranks[i]) && !c.Ranks[i].Exact() {
				return false
			}
		}
		return true
	}
	cc := replay.CheckConfig{
		Fleet: r.fleet, Registry: rt.Registry, Router: rt.Router, Model: r.cfg.model, Truth: truth,
		ScoreIf: func(ranks []replay.RankCheck) bool {
			for i := range ranks {
				if must(i, &ranks[i]) && !ranks[i].CountsAgree() {
					return false
				}
			}
			return true
		},
	}
	deadline := time.Now().Add(r.cfg.timeout)
	var (
		first, last *replay.ExactCheck
		lastErr     error
	)
	for {
		c, err := replay.CheckExact(ctx, cc)
		if ctx.Err() != nil {
			return nil, 0, false, ctx.Err()
		}
		if err != nil {
			lastErr = err
		} else {
			last = c
			if first == nil && exact(c) {
				first = c
				r.logf("index exact %v after %s", c.At.Sub(since).Round(time.Millisecond), map[bool]string{true: "the restart", false: "the live replay"}[catchUp])
			}
		}
		settled := last != nil && (!catchUp || restoresSettled(last))
		switch {
		case first != nil && (settled || time.Since(first.At) > 3*time.Second):
			// Report the first exact check with the latest restore outcomes.
			for i := range first.Ranks {
				first.Ranks[i].Restore = last.Ranks[i].Restore
			}
			return first, first.At.Sub(since), true, nil
		case time.Now().After(deadline):
			if last == nil {
				return nil, 0, false, fmt.Errorf("router never answered ListWorkers after the restart: %w", lastErr)
			}
			return last, 0, false, nil
		case last != nil && time.Since(since) > r.cfg.timeout/4 && registryEmpty(last):
			// Nobody re-registers the fleet: an empty registry stays empty.
			return last, 0, false, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func restoresSettled(c *replay.ExactCheck) bool {
	for _, rc := range c.Ranks {
		if !rc.Listed || rc.Restore == "" {
			return false
		}
	}
	return true
}

func registryEmpty(c *replay.ExactCheck) bool {
	for _, rc := range c.Ranks {
		if rc.Listed {
			return false
		}
	}
	return true
}

// verdict lists what failed: the registry, a rank whose engine still has the
// history and is not exact (or not "restored"), the short-buffer rank not
// "rebuilt", a rebuilt rank claiming blocks its engine does not hold.
func (r *restartRun) verdict(res *restartResult) {
	fail := func(format string, a ...any) { res.Failures = append(res.Failures, fmt.Sprintf(format, a...)) }
	if !res.Serving {
		fail("health never SERVING after the restart")
	}
	for _, c := range []struct {
		name string
		c    *replay.ExactCheck
	}{{"after the restart", res.CatchUp}, {"after the live replay", res.Final}} {
		if c.c == nil {
			continue
		}
		if len(c.c.Registry) > 0 {
			fail("registry not whole %s: %s", c.name, strings.Join(c.c.Registry, "; "))
		}
		if c.c.ScoreErr != "" {
			fail("Score failed %s: %s", c.name, c.c.ScoreErr)
		}
	}
	if res.CatchUp == nil {
		return
	}
	for i, x := range res.Expect {
		rc := &res.CatchUp.Ranks[i]
		if !rc.Listed {
			continue // counted with the registry
		}
		want, why := x.want()
		if !slices.Contains(want, rc.Restore) {
			fail("%s: restore %q, want %s: %s", rc.Worker, rc.Restore, strings.Join(want, " or "), why)
		}
		if x.mustExact(rc.Restore) && !rc.Exact() {
			fail("%s: not exact after the restart, though %s: %s", rc.Worker, why, rc.Reason())
		}
		if rc.Restore == replay.RestoreRebuilt && rc.Overstates() {
			fail("%s: rebuilt, but claims blocks its engine does not hold: %s", rc.Worker, rc.Reason())
		}
	}
	if x := res.Expect[0]; r.cfg.shortBuffer > 0 && x.Fresh {
		fail("scenario: engine-00 had published nothing as of the last snapshot, so its short buffer was not tested: raise --kill-min")
	} else if r.cfg.shortBuffer > 0 && !x.Reset && !x.mustRebuild() {
		fail("scenario: engine-00 published only %d batches while the router was down, within its %d-batch buffer: raise --downtime or lower --short-buffer", res.Expect[0].Down, res.Expect[0].Buffer)
	}
	if res.Final != nil {
		for i := range res.Expect {
			if rc := &res.Final.Ranks[i]; rc.Listed && finalMustExact(res, i) && !rc.Exact() {
				fail("%s: not exact after the live replay: %s", rc.Worker, rc.Reason())
			}
		}
	}
}

// finalMustExact: after live events, every rank that had to be exact after
// the restart still must, unless the router rebuilt it (it still lacks what
// its engine's buffer lost).
func finalMustExact(res *restartResult, i int) bool {
	before := res.CatchUp.Ranks[i].Restore
	return before != replay.RestoreRebuilt && res.Expect[i].mustExact(before)
}

func listDir(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	if len(ents) == 0 {
		return "empty"
	}
	var parts []string
	for _, e := range ents {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			parts = append(parts, fmt.Sprintf("%s %s", e.Name(), byteSize(info.Size())))
		} else {
			parts = append(parts, e.Name()+"/")
		}
	}
	return strings.Join(parts, ", ")
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func (r *restartRun) report(res *restartResult) {
	w := r.out
	ms := func(d time.Duration) string {
		if d < time.Millisecond {
			return "<1ms"
		}
		return d.Round(time.Millisecond).String()
	}
	serving := "never"
	if res.Serving {
		serving = ms(res.ToServing)
		if res.NotServing > 0 {
			serving += fmt.Sprintf(" (NOT_SERVING for %s before)", ms(res.NotServing))
		} else {
			serving += " (NOT_SERVING not seen)"
		}
	}
	exact := "not reached within " + r.cfg.timeout.String()
	if res.Exact {
		exact = ms(res.ToExact)
	}
	fmt.Fprintf(w, "down %s; restart -> SERVING %s; restart -> exact %s\n", ms(res.Downtime), serving, exact)
	fmt.Fprintf(w, "placement: %d by Route, %d random (router down or --policy random), %d Route errors while up\n",
		r.routed.Load(), r.fallback.Load(), r.routeErr.Load())
	if res.CatchUp == nil {
		return
	}
	listed := 0
	for _, rc := range res.CatchUp.Ranks {
		if rc.Listed {
			listed++
		}
	}
	reg := "whole"
	if len(res.CatchUp.Registry) > 0 {
		reg = strings.Join(res.CatchUp.Registry, "; ")
	}
	fmt.Fprintf(w, "registry: %d of %d workers listed, %s\n", listed, r.cfg.engines, reg)
	var outcomes []string
	for _, o := range []string{replay.RestoreRestored, replay.RestoreRebuilt, replay.RestoreReset, replay.RestoreKept, replay.RestoreCleared} {
		outcomes = append(outcomes, fmt.Sprintf("%s %d", o, res.Restore[o]))
	}
	outcomes = append(outcomes, fmt.Sprintf("none %d", res.Restore[""]))
	fmt.Fprintf(w, "restore: %s\n", strings.Join(outcomes, ", "))
	r.table(res.CatchUp, res.Expect, "after the restart")
	if res.Final != nil {
		fe := "not reached within " + r.cfg.timeout.String()
		if res.FinalOK {
			fe = ms(res.FinalExact)
		}
		fmt.Fprintf(w, "after %v of live events: exact %s after the replay ended\n", r.cfg.after, fe)
		r.table(res.Final, res.Expect, "after the live replay")
	}
	if len(res.Failures) == 0 {
		fmt.Fprintln(w, "PASS")
		return
	}
	fmt.Fprintf(w, "FAIL (%d):\n", len(res.Failures))
	for _, f := range res.Failures {
		fmt.Fprintf(w, "  - %s\n", f)
	}
}

func (r *restartRun) table(c *replay.ExactCheck, expect []rankExpect, title string) {
	exact := 0
	for i := range c.Ranks {
		if c.Ranks[i].Exact() {
			exact++
		}
	}
	fmt.Fprintf(r.out, "%s: %d of %d ranks exact (Score on %d cached prompts, up to %d per engine, for every rank)\n",
		title, exact, len(c.Ranks), c.Prompts, r.cfg.samples)
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  rank\trestore\texpected\tdown/window/buffer\trouter\tengine\tscore ok\tverdict")
	for i, rc := range c.Ranks {
		restore := rc.Restore
		if restore == "" {
			restore = "-"
		}
		score := "-"
		if rc.Scored {
			score = fmt.Sprintf("%d/%d", rc.Prompts-rc.Over-rc.Under, rc.Prompts)
		}
		verdict := "exact"
		if !rc.Exact() {
			verdict = "not exact: " + rc.Reason()
		}
		x := expect[i]
		fmt.Fprintf(tw, "  %s/0\t%s\t%s\t%d/%d/%d\t%d\t%d\t%s\t%s\n", rc.Worker, restore, x, x.Down, x.Window, x.Buffer,
			rc.RouterBlocks, rc.EngineBlocks, score, verdict)
	}
	tw.Flush()
	r.out.Write(b.Bytes())
}
