package restart

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
)

// drive runs the phases: the first router and the replay up to the end of
// the downtime with the kill in it, the expectations from the engines'
// seqs, the restart and the catch-up check, then live events and a final
// check.
func (r *run) drive(ctx context.Context) (*Result, error) {
	cfg := r.cfg
	res := &Result{Restore: map[string]int{}}

	first, err := r.startFirst(ctx)
	if err != nil {
		return nil, err
	}
	defer first.Stop()

	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6b696c6c))
	res.KillAt = cfg.KillMin + time.Duration(rng.Int64N(int64(cfg.KillMax-cfg.KillMin)+1))
	k1, err := r.replayThroughKill(ctx, first, res)
	if err != nil {
		return nil, err
	}

	second, log2, err := r.restart(ctx, res, k1.killTime)
	if err != nil {
		return nil, err
	}
	defer second.Stop()
	catchUpMust := func(i int, rc *replay.RankCheck) bool { return res.Expect[i].mustExact(rc.Restore) }
	res.CatchUp, res.ToExact, res.Exact, err = r.pollExact(ctx, second, k1.truth, catchUpMust, second.Started, true)
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, logTail(log2, 10))
	}
	for _, rc := range res.CatchUp.Ranks {
		if rc.Listed {
			res.Restore[rc.Restore]++
		}
	}

	if cfg.After > 0 && len(res.CatchUp.Registry) == 0 {
		if err := r.liveAfter(ctx, second, k1.next, res); err != nil {
			return nil, fmt.Errorf("%w%s", err, logTail(log2, 10))
		}
	}
	r.verdict(res)
	return res, nil
}

// launch starts a router on the run's state dir (and, after the first, on
// the first one's addresses), logging to router-N.log in the work dir.
func (r *run) launch(n int) (*harness.Router, string, error) {
	logPath := filepath.Join(r.workDir, fmt.Sprintf("router-%d.log", n))
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, "", fmt.Errorf("router log: %w", err)
	}
	// The router owns the file through its stdout/stderr; closing our handle
	// once the process has it open is safe.
	defer lf.Close()
	rt, err := harness.LaunchRouter(harness.RouterConfig{
		Bin: r.cfg.RouterBin, GRPCAddr: r.grpcAddr, HTTPAddr: r.httpAddr, Args: r.args, Log: lf,
	})
	if err != nil {
		return nil, logPath, err
	}
	r.grpcAddr, r.httpAddr = rt.GRPCAddr, rt.HTTPAddr
	return rt, logPath, nil
}

// startFirst starts the first router and registers the fleet over gRPC, so
// the registry must survive the kill.
func (r *run) startFirst(ctx context.Context) (*harness.Router, error) {
	first, log1, err := r.launch(1)
	if err != nil {
		return nil, err
	}
	if err := first.WaitAnswering(ctx, 20*time.Second); err != nil {
		first.Stop()
		return nil, fmt.Errorf("first router: %w%s", err, logTail(log1, 10))
	}
	if err := r.fleet.Register(ctx, first.Registry, r.cfg.Model, 20*time.Second); err != nil {
		first.Stop()
		return nil, err
	}
	r.live.Store(first)
	r.logf("router pid %d on %s; %d engines registered and subscribed", first.PID(), r.grpcAddr, r.cfg.Engines)
	return first, nil
}

// phase1 is what the replay through the kill leaves for the rest of the run.
type phase1 struct {
	next     int // schedule index of the first request not yet played
	killTime time.Time
	truth    *replay.Truth
}

// replayThroughKill replays the schedule up to res.KillAt plus the
// downtime, kills the router with SIGKILL at res.KillAt, sets res.Expect
// from the engines' seqs and takes the truth while the engines are quiet.
func (r *run) replayThroughKill(ctx context.Context, first *harness.Router, res *Result) (phase1, error) {
	cfg := r.cfg
	end1 := simOf(res.KillAt+cfg.Downtime, cfg.SpeedUp)
	k := sort.Search(len(r.sched), func(i int) bool { return r.sched[i].Arrival > end1 })
	clock := replay.Clock{T0: time.Now(), SpeedUp: cfg.SpeedUp}

	sampler := r.startSampler()
	killer := r.startKiller(ctx, first, clock.T0.Add(res.KillAt), res.KillAt)
	r.logf("replaying %d requests (%v of trace time) over %v; kill -9 at %.2fs", k, end1.Truncate(time.Second),
		(res.KillAt + cfg.Downtime).Round(time.Millisecond), res.KillAt.Seconds())
	playStart := time.Now()
	playErr := r.playSegments(ctx, k, clock, res.KillAt, killer.done)
	playWall := time.Since(playStart)
	<-killer.done
	samples := sampler.stop()
	if playErr != nil {
		return phase1{}, playErr
	}
	if killer.err != nil {
		return phase1{}, fmt.Errorf("kill: %w", killer.err)
	}
	seqDown := r.seqs()
	res.Expect = r.expectations(seqSampleBefore(samples, killer.at.Add(-2*cfg.Snapshot), len(seqDown)), killer.seqs, seqDown)
	var downBatches uint64
	for _, x := range res.Expect {
		downBatches += x.Down
	}

	// The engines are quiet now: take the truth before the restart, so
	// restart -> exact is the router's time alone.
	truth := r.truth(rand.New(rand.NewPCG(cfg.Seed, 1)))
	fmt.Fprintf(r.out, "replay: %d requests in %.1fs; kill -9 at %.2fs (pid %d); %d batches published while down\n",
		k, playWall.Seconds(), res.KillAt.Seconds(), first.PID(), downBatches)
	fmt.Fprintf(r.out, "state dir at restart: %s\n", listDir(r.stateDir))
	return phase1{next: k, killTime: killer.at, truth: truth}, nil
}

// playSegments plays the schedule's first k requests. With RestartEng the
// replay pauses halfway through the downtime (every request before is
// published) while engine-01 restarts, after the kill.
func (r *run) playSegments(ctx context.Context, k int, clock replay.Clock, killAt time.Duration, killed <-chan struct{}) error {
	cfg := r.cfg
	segments := [][2]int{{0, k}}
	if cfg.RestartEng {
		kr := sort.Search(k, func(i int) bool { return r.sched[i].Arrival > simOf(killAt+cfg.Downtime/2, cfg.SpeedUp) })
		segments = [][2]int{{0, kr}, {kr, k}}
	}
	for si, seg := range segments {
		if si == 1 {
			<-killed
			if err := r.fleet.Engines[1].Restart(); err != nil {
				return fmt.Errorf("restart engine-01: %w", err)
			}
			r.logf("engine-01 restarted (new process: seq from 0, empty cache)")
		}
		pr, err := replay.Play(ctx, replay.PlayConfig{Fleet: r.fleet, Requests: r.sched[seg[0]:seg[1]], Clock: clock, Choose: r.choose(seg[0])})
		if err != nil {
			return err
		}
		if pr.PublishErrs > 0 {
			return fmt.Errorf("engines failed to publish %d batches: %s", pr.PublishErrs, pr.FirstError)
		}
	}
	return nil
}

// seqSample is every engine's publisher seq at one time.
type seqSample struct {
	at   time.Time
	seqs []uint64
}

// sampler records the engines' seqs every 50 ms, to bound what the
// router's last snapshot before the kill saw.
type sampler struct {
	samples []seqSample
	quit    chan struct{}
	done    chan struct{}
}

func (r *run) startSampler() *sampler {
	s := &sampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			s.samples = append(s.samples, seqSample{time.Now(), r.seqs()})
			select {
			case <-s.quit:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the samples.
func (s *sampler) stop() []seqSample {
	close(s.quit)
	<-s.done
	return s.samples
}

// seqSampleBefore is the last sample taken at or before t (zeros if none).
func seqSampleBefore(samples []seqSample, t time.Time, n int) []uint64 {
	seqs := make([]uint64, n)
	for _, s := range samples {
		if !s.at.After(t) {
			seqs = s.seqs
		}
	}
	return seqs
}

// killer kills the router at a time; its fields are set before done closes.
type killer struct {
	done chan struct{}
	at   time.Time
	seqs []uint64 // the engines' seqs at the kill
	err  error
}

func (r *run) startKiller(ctx context.Context, rt *harness.Router, at time.Time, killAt time.Duration) *killer {
	k := &killer{done: make(chan struct{})}
	go func() {
		defer close(k.done)
		tm := time.NewTimer(time.Until(at))
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			k.err = ctx.Err()
			return
		}
		r.live.Store(nil)
		k.seqs, k.at = r.seqs(), time.Now()
		k.err = rt.Kill()
		r.logf("kill -9 router pid %d at %.2fs of replay; engines keep publishing for %v", rt.PID(), killAt.Seconds(), r.cfg.Downtime)
	}()
	return k
}

// expectations is what each rank's restore must be, from the engines' seqs
// two snapshot intervals before the kill, at the kill and at the restart.
func (r *run) expectations(seqBefore, seqKill, seqDown []uint64) []RankExpect {
	cfg := r.cfg
	x := make([]RankExpect, cfg.Engines)
	for i := range x {
		b := cfg.Buffer
		if i == 0 && cfg.ShortBuffer > 0 {
			b = cfg.ShortBuffer
		}
		if cfg.RestartEng && i == 1 { // the new process's stream
			x[i] = RankExpect{Buffer: b, Down: seqDown[i], Window: seqDown[i], Total: seqDown[i], Reset: true}
			continue
		}
		x[i] = RankExpect{Buffer: b, Down: seqDown[i] - seqKill[i], Window: seqDown[i] - seqBefore[i], Total: seqDown[i], Fresh: seqBefore[i] == 0}
	}
	return x
}

// restart starts the second router on the same state dir and addresses,
// times health SERVING and, with Reregister, registers the fleet again.
func (r *run) restart(ctx context.Context, res *Result, killTime time.Time) (*harness.Router, string, error) {
	second, log2, err := r.launch(2)
	if err != nil {
		return nil, log2, err
	}
	res.Downtime = second.Started.Sub(killTime)
	r.logf("router restarted (pid %d) after %v down", second.PID(), res.Downtime.Round(time.Millisecond))
	if err := r.waitServing(ctx, second, res); err != nil {
		second.Stop()
		return nil, log2, fmt.Errorf("%w%s", err, logTail(log2, 10))
	}
	if r.cfg.Reregister {
		for _, e := range r.fleet.Engines { // as Fleet.Register, without waiting for subscribers
			w := &kvrouterv1.Worker{WorkerId: e.ID(), Model: r.cfg.Model, Endpoint: "sim://" + e.ID(),
				KvEventsEndpoint: e.Endpoint(), ReplayEndpoint: e.ReplayEndpoint(), DpSize: 1, BlockSize: 16}
			if _, err := second.Registry.RegisterWorker(ctx, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
				second.Stop()
				return nil, log2, fmt.Errorf("register %s again: %w", e.ID(), err)
			}
		}
	}
	r.live.Store(second)
	return second, log2, nil
}

// liveAfter replays cfg.After of live events from schedule index k on the
// restored router, then checks it once more (res.Final). A router that does
// not subscribe again is a failure, not an error.
func (r *run) liveAfter(ctx context.Context, rt *harness.Router, k int, res *Result) error {
	cfg := r.cfg
	if err := r.waitSubscribed(ctx, 5*time.Second); err != nil {
		res.Failures = append(res.Failures, err.Error())
		return nil
	}
	if k >= len(r.sched) {
		return nil
	}
	start := r.sched[k].Arrival
	end2 := start + simOf(cfg.After, cfg.SpeedUp)
	k2 := sort.Search(len(r.sched), func(i int) bool { return r.sched[i].Arrival > end2 })
	clock2 := replay.Clock{T0: time.Now().Add(-time.Duration(float64(start) / cfg.SpeedUp)), SpeedUp: cfg.SpeedUp}
	r.logf("live replay of %d requests for %v", k2-k, cfg.After)
	if _, err := replay.Play(ctx, replay.PlayConfig{Fleet: r.fleet, Requests: r.sched[k:k2], Clock: clock2, Choose: r.choose(k)}); err != nil {
		return err
	}
	truth2 := r.truth(rand.New(rand.NewPCG(cfg.Seed, 2)))
	t2 := time.Now()
	finalMust := func(i int, _ *replay.RankCheck) bool { return finalMustExact(res, i) }
	var err error
	res.Final, res.FinalExact, res.FinalOK, err = r.pollExact(ctx, rt, truth2, finalMust, t2, false)
	return err
}

// choose places request base+seq: with Route while the router is up (policy
// route), else a seeded random engine. It never fails, so Play never falls
// back, and it records who served what for the Score samples.
func (r *run) choose(base int) replay.ChooseFunc {
	n := len(r.fleet.Engines)
	return func(ctx context.Context, seq int, tokens []uint32, _ string) (replay.Choice, error) {
		i, e := base+seq, -1
		if rt := r.live.Load(); rt != nil && r.cfg.Policy == PolicyRoute {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err := rt.Router.Route(rctx, &kvrouterv1.RouteRequest{
				Prompt: &kvrouterv1.Prompt{Model: r.cfg.Model, TokenIds: tokens}, MaxCandidates: 1,
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
			e = rand.New(rand.NewPCG(r.cfg.Seed, uint64(i))).IntN(n)
			r.fallback.Add(1)
		}
		r.mu.Lock()
		r.served[e] = append(r.served[e], i)
		r.mu.Unlock()
		return replay.Choice{Engine: e}, nil
	}
}

func (r *run) seqs() []uint64 {
	s := make([]uint64, len(r.fleet.Engines))
	for i, e := range r.fleet.Engines {
		s[i] = e.Publisher().Seq()
	}
	return s
}
