package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/stats"
)

// runPolicy runs one variant on a fresh fleet (and fresh routers).
func runPolicy(ctx context.Context, cfg CompareConfig, v variant) (*PolicyResult, error) {
	fleet, err := harness.StartFleet(harness.FleetConfig{
		Engines: cfg.Engines,
		Replay:  true,
		Engine: engine.Config{
			BlockSize: cfg.BlockSize, CapacityBlocks: cfg.Capacity, Format: cfg.Format,
			PrefillPerToken: cfg.PrefillPerToken, DecodePerToken: cfg.DecodePerToken,
			Model: cfg.EngineModel, MaxNumBatchedTokens: cfg.MaxNumBatchedTokens, MaxNumSeqs: cfg.MaxNumSeqs,
			Tokenizer: cfg.Tokenizer, ChatTemplate: cfg.ChatTemplate,
		},
	})
	if err != nil {
		return nil, err
	}
	defer fleet.Close()

	var (
		choose ChooseFunc
		side   *routerSide
	)
	switch {
	case isRouterPolicy(v.policy):
		if side, err = startRouterSide(ctx, cfg, v, fleet); err != nil {
			return nil, err
		}
		defer side.close()
		choose = side.choose
		if cfg.Text != nil { // (checkText: one router, called directly)
			choose = TextRouterChooser(side.router.Router, fleet, cfg.Model, cfg.Text, cfg.TextBody)
		}
	case v.policy == PolicyRoundRobin:
		choose = RoundRobin(cfg.Engines)
	case v.policy == PolicyRandom:
		choose = Random(cfg.Engines, cfg.Seed)
	default:
		return nil, fmt.Errorf("unknown policy %q (want one of %s)", v.policy, strings.Join(AllPolicies, ", "))
	}
	sp := newSplitter(cfg, v, fleet, side)

	pc := playConfig(cfg, v, fleet, side, sp.wrap(choose))
	var before sideCounters
	if side != nil {
		if before, err = side.counters(); err != nil {
			return nil, err
		}
	}
	probe := startLagProbe(ctx, cfg, v, side)
	pr, err := Play(ctx, pc)
	sp.wait()
	lag, lagErr := probe.wait()
	if err != nil {
		return nil, err
	}
	if pc.Records {
		if err := writeRecords(filepath.Join(cfg.OutDir, "requests-"+v.fileName()+".jsonl"), pr.Records); err != nil {
			return nil, err
		}
	}
	tot := fleet.Totals()
	res := newPolicyResult(v, pr, tot, fleet)
	if cfg.Text != nil && side != nil && side.router != nil {
		res.Tokenization = tokenizationCheck(side.router)
	}
	sp.fill(res, tot)
	if side != nil {
		res.Unsettled = side.unsettled.Load()
	}
	res.SyncLag = lag
	if lagErr != nil {
		res.SyncLagError = lagErr.Error()
	}
	if side != nil {
		if err := side.finish(ctx, cfg.Model, res, before, tot.Events, pr); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// playConfig is the replay of one variant: choices by choose, marks to
// the router side (if any), a progress line to cfg.Progress.
func playConfig(cfg CompareConfig, v variant, fleet *harness.Fleet, side *routerSide, choose ChooseFunc) PlayConfig {
	pc := PlayConfig{
		Fleet: fleet, Requests: cfg.Requests, Choose: choose, IDPrefix: v.policy + "-",
		Clock: Clock{T0: time.Now().Add(200 * time.Millisecond), SpeedUp: cfg.SpeedUp},
		Text:  cfg.Text, Body: cfg.TextBody,
		Records: cfg.Records && cfg.OutDir != "",
	}
	if side != nil {
		pc.Router = side.marks
	}
	if cfg.Lockstep {
		pc.Lockstep = true
		if side != nil {
			pc.Settle = side.settler(fleet, cfg.Model)
			pc.SettleLoad = side.sharesLoad()
		}
	}
	if cfg.Progress != nil {
		label := v.label()
		pc.OnProgress = func(p Progress) {
			t := fleet.Totals()
			fmt.Fprintf(cfg.Progress, "%-22s %6d/%d requests  trace time %-9s  lag %-8s  hit %.1f%%\n",
				label, p.Dispatched, p.Total, p.Sim.Truncate(time.Second), p.Lag.Truncate(time.Millisecond), 100*hitRate(t))
		}
	}
	return pc
}

// newPolicyResult is the figures of one played variant that the fleet and
// the player measured (the router side adds its own).
func newPolicyResult(v variant, pr *PlayResult, tot engine.Stats, fleet *harness.Fleet) *PolicyResult {
	res := &PolicyResult{
		Policy: v.policy, Requests: pr.Requests, Replicas: v.replicas, Sync: v.sync, Round: v.round,
		PromptBlocks: tot.PromptBlocks, CachedBlocks: tot.CachedBlocks, HitRate: hitRate(tot),
		PromptTokens:    pr.PromptTokens,
		TTFT:            stats.Summarize(pr.TTFT),
		TPOT:            stats.Summarize(pr.TPOT),
		Route:           stats.Summarize(pr.RouteLatency),
		EventsPublished: tot.Events, Preemptions: tot.Preemptions, Dropped: pr.Dropped,
		ChooseErrors: pr.ChooseErrors, MarkErrors: pr.MarkErrors, FirstError: pr.FirstError,
		MaxLag: pr.MaxLag.Truncate(time.Millisecond).String(), WallSeconds: pr.Wall.Seconds(),
		PausedSeconds: pr.Paused.Seconds(),
	}
	if pr.BurstRequests > 0 {
		res.BurstPiled = float64(pr.BurstPiled) / float64(pr.BurstRequests)
	}
	if pr.RouterPromptBlocks > 0 {
		res.RouterHitRate = float64(pr.RouterMatched) / float64(pr.RouterPromptBlocks)
	}
	loads := make([]float64, len(pr.PromptTokens))
	for i, n := range pr.PromptTokens {
		loads[i] = float64(n)
	}
	res.Imbalance = stats.Imbalance(loads)
	work := make([]float64, len(fleet.Engines))
	for i, e := range fleet.Engines {
		s := e.Stats()
		work[i] = float64(s.PromptBlocks - s.CachedBlocks)
	}
	res.PrefillImbalance = stats.Imbalance(work)
	return res
}

func hitRate(s engine.Stats) float64 {
	if s.PromptBlocks == 0 {
		return 0
	}
	return float64(s.CachedBlocks) / float64(s.PromptBlocks)
}

// routerSide is what a router policy's run started: one router called
// directly, or replicas behind a gateway (sharing NATS in cluster mode).
type routerSide struct {
	choose ChooseFunc
	marks  kvrouterv1.RouterClient
	router *harness.Router
	reps   *harness.Replicas
	gw     *harness.Gateway
	epp    *EPPGateway // PolicyKVEPP: requests go through the endpoint picker
	http   *HTTPSide   // PolicyKVEPPHTTP: and through bench's HTTP gateway
	nats   *harness.NATS
	tap    *harness.NATSTap
	logs   []*os.File
	// unsettled counts the lockstep waits a router did not catch up in.
	unsettled atomic.Int64
}

// UnsettledAfter is how long a lockstep replay waits for a router to apply
// what the engines published before it routes anyway (and counts it): a
// router that lost a batch for good must not stop the replay.
const UnsettledAfter = 5 * time.Second

// settler is PlayConfig.Settle for the side's routers: it returns once each
// has applied every batch the fleet published and, with replicas, each has
// applied every load change the others had shared (harness.LoadSynced), or
// UnsettledAfter has passed, or the router failed to answer (then it is not
// waited for again: a replica killed mid-run).
func (s *routerSide) settler(fleet *harness.Fleet, model string) func(context.Context) error {
	var regs []kvrouterv1.RegistryClient
	if s.router != nil {
		regs = append(regs, s.router.Registry)
	}
	if s.reps != nil {
		for _, r := range s.reps.Routers {
			regs = append(regs, r.Registry)
		}
	}
	gone := make([]bool, len(regs)) // a router that failed to answer (killed): not waited for again
	loadGone := false               // a replica's /metrics failed past UnsettledAfter: not asked again
	return func(ctx context.Context) error {
		deadline := time.Now().Add(UnsettledAfter)
		for i, reg := range regs {
			if gone[i] {
				continue
			}
			settled := false
			err := waitUntil(ctx, func() bool {
				ok, err := fleet.Applied(ctx, reg, model)
				gone[i] = err != nil && ctx.Err() == nil
				settled = ok && err == nil
				return settled || gone[i] || time.Now().After(deadline)
			})
			if err != nil {
				return err
			}
			if !settled {
				s.unsettled.Add(1)
			}
		}
		if loadGone || !s.sharesLoad() {
			return nil
		}
		synced, failing, err := s.awaitLoadSynced(ctx, deadline)
		if err == nil && !synced {
			s.unsettled.Add(1)
			loadGone = failing
		}
		return err
	}
}

// sharesLoad reports whether the side is replicas sharing their load.
func (s *routerSide) sharesLoad() bool {
	return s.reps != nil && s.reps.Sync && len(s.reps.Routers) > 1
}

// awaitLoadSynced polls harness.LoadSynced until it holds or deadline
// passes; failing reports that the last poll failed. A replica being
// killed fails its /metrics until it has exited (then LoadSynced leaves it
// out), so errors are retried until the deadline.
func (s *routerSide) awaitLoadSynced(ctx context.Context, deadline time.Time) (synced, failing bool, err error) {
	err = waitUntil(ctx, func() bool {
		ok, perr := s.reps.LoadSynced()
		synced, failing = ok && perr == nil, perr != nil
		return synced || time.Now().After(deadline)
	})
	return synced, failing, err
}

// startRouterSide starts the routers a router policy needs (one, or
// replicas behind the gateway with NATS, or the endpoint picker), and on
// error stops what it started (the named err). It is longer than ~80 lines
// because each policy's wiring is a branch of it, side by side.
func startRouterSide(ctx context.Context, cfg CompareConfig, v variant, fleet *harness.Fleet) (_ *routerSide, err error) {
	rc := cfg.Router
	rc.BlockSize = cfg.BlockSize
	rc.Args = append([]string(nil), cfg.Router.Args...)
	if v.policy == PolicyKVNoPredict {
		rc.Args = append(rc.Args, "--predict=false")
	}
	if v.policy == PolicyKVEPP || v.policy == PolicyKVEPPHTTP {
		if v.replicas > 0 {
			return nil, fmt.Errorf("policy %s runs one router, not %d replicas", v.policy, v.replicas)
		}
		rc.EPP = true
	}
	rc.Args = ScaleRouterArgs(rc.Args, cfg.SpeedUp)
	s := &routerSide{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	logName := v.fileName()
	logFor := func(name string) io.Writer {
		if cfg.OutDir == "" {
			return nil
		}
		lf, err := os.Create(filepath.Join(cfg.OutDir, "router-"+name+".log"))
		if err != nil {
			return nil // logs are a convenience; the run does not need them
		}
		s.logs = append(s.logs, lf)
		return lf
	}
	if v.replicas == 0 {
		rc.Log = logFor(logName)
		if s.router, err = harness.StartRouter(ctx, rc); err != nil {
			return nil, err
		}
		if v.policy == PolicyKVEPPHTTP {
			if s.http, err = StartHTTPSide(fleet, s.router.EPPAddr); err != nil {
				return nil, err
			}
			fleet.Endpoints = s.http.Endpoints()
		}
		if err = fleet.Register(ctx, s.router.Registry, cfg.Model, 20*time.Second); err != nil {
			return nil, err
		}
		s.choose, s.marks = RouterChooser(s.router.Router, fleet, cfg.Model), s.router.Router
		if s.http != nil {
			s.choose, s.marks = s.http.Chooser(cfg.Model), s.http
		} else if rc.EPP {
			if s.epp, err = NewEPPGateway(s.router.EPPAddr); err != nil {
				return nil, err
			}
			s.choose, s.marks = s.epp.Chooser(fleet, cfg.Model), s.epp
		}
		return s, nil
	}
	rcfg := harness.ReplicasConfig{N: v.replicas, Router: rc,
		Logs: func(i int) io.Writer { return logFor(logName + "-" + strconv.Itoa(i)) }}
	if v.sync {
		if s.nats, err = harness.StartNATS(0); err != nil {
			return nil, err
		}
		rcfg.NATSURL = s.nats.URL()
	}
	if s.reps, err = harness.StartReplicas(ctx, rcfg); err != nil {
		return nil, err
	}
	if err = s.reps.Register(ctx, fleet, cfg.Model, 20*time.Second); err != nil {
		return nil, err
	}
	addrs := make([]string, len(s.reps.Routers))
	for i, r := range s.reps.Routers {
		addrs[i] = r.GRPCAddr
	}
	if s.gw, err = harness.NewGateway(harness.GatewayConfig{Addrs: addrs, Marks: cfg.Marks, RoutesToFirst: cfg.RoutesToFirst}); err != nil {
		return nil, err
	}
	if s.nats != nil {
		if s.tap, err = s.nats.Tap(natsPrefix(rc.Args)); err != nil {
			return nil, err
		}
	}
	s.choose, s.marks = GatewayChooser(s.gw, fleet, cfg.Model), s.gw.Marks()
	return s, nil
}

func (s *routerSide) close() {
	if s.gw != nil {
		s.gw.Close()
	}
	if s.epp != nil {
		s.epp.Close()
	}
	if s.http != nil {
		s.http.Close()
	}
	if s.reps != nil {
		s.reps.Stop()
	}
	if s.router != nil {
		s.router.Stop()
	}
	if s.tap != nil {
		s.tap.Close()
	}
	if s.nats != nil {
		s.nats.Close()
	}
	for _, f := range s.logs {
		f.Close()
	}
}

// sideCounters are the cumulative counters a run's figures are deltas of.
type sideCounters struct {
	cpu      time.Duration
	diverted float64             // Routes the guard diverted, every live router's
	nats     harness.NATSTraffic // the server's, less what it sent the tap
	flows    map[string]harness.NATSFlow
}

func (s *routerSide) counters() (sideCounters, error) {
	var c sideCounters
	var err error
	if s.router != nil {
		c.cpu, err = s.router.CPUTime()
	} else {
		c.cpu, err = s.reps.CPUTime()
	}
	if err != nil {
		return c, err
	}
	if c.diverted, err = s.diverted(); err != nil {
		return c, err
	}
	if s.nats == nil {
		return c, nil
	}
	if c.nats, err = s.nats.Traffic(); err != nil {
		return c, err
	}
	own, err := s.tap.Own()
	if err != nil {
		return c, err
	}
	c.nats = c.nats.Sub(own)
	c.flows = s.tap.Flows()
	return c, nil
}

// diverted sums kvrouter_route_balance_diverted_total over the routers
// still running.
func (s *routerSide) diverted() (float64, error) {
	const name = "kvrouter_route_balance_diverted_total"
	if s.router != nil {
		return s.router.MetricSum(name)
	}
	return s.reps.MetricSum(name)
}

// natsPrefix is the --nats-prefix in args, else the router's default.
func natsPrefix(args []string) string {
	p := "kvrouter"
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--nats-prefix="), strings.HasPrefix(a, "-nats-prefix="):
			p = a[strings.IndexByte(a, '=')+1:]
		case (a == "--nats-prefix" || a == "-nats-prefix") && i+1 < len(args):
			p = args[i+1]
		}
	}
	return p
}

// registry is the Registry of the first router still running.
func (s *routerSide) registry() kvrouterv1.RegistryClient {
	if s.router != nil {
		return s.router.Registry
	}
	for _, r := range s.reps.Routers {
		select {
		case <-r.Exited():
		default:
			return r.Registry
		}
	}
	return s.reps.Routers[0].Registry
}

// finish waits for the router to apply what was published and fills in the
// router-side figures.
func (s *routerSide) finish(ctx context.Context, model string, res *PolicyResult, before sideCounters, published uint64, pr *PlayResult) error {
	after, err := s.counters()
	if err != nil {
		return err
	}
	routes := len(pr.RouteLatency)
	res.RouterCPUSeconds = (after.cpu - before.cpu).Seconds()
	if routes > 0 {
		res.RouterCPUPerRoute = 1e6 * res.RouterCPUSeconds / float64(routes)
		res.Diverted = (after.diverted - before.diverted) / float64(routes)
	}
	if s.nats != nil {
		d := after.nats.Sub(before.nats)
		res.NATS = &d
		res.NATSPublished = map[string]harness.NATSFlow{}
		for k, f := range after.flows {
			b := before.flows[k]
			res.NATSPublished[k] = harness.NATSFlow{Msgs: f.Msgs - b.Msgs, Bytes: f.Bytes - b.Bytes}
		}
		if routes > 0 {
			res.NATSMsgsPerRoute = float64(d.InMsgs+d.OutMsgs) / float64(routes)
			res.NATSBytesPerRoute = float64(d.InBytes+d.OutBytes) / float64(routes)
			l := res.NATSPublished["load"]
			res.LoadMsgsPerRoute = float64(l.Msgs) / float64(routes)
			res.LoadBytesPerRoute = float64(l.Bytes) / float64(routes)
		}
	}
	if s.gw != nil {
		st := s.gw.Stats()
		res.Gateway = &st
		if res.Failover != nil {
			res.Failover.After = st.Sub(res.Failover.After)
		}
	}
	if res.EventsApplied, err = drainEventsApplied(ctx, s.registry(), model, published); err != nil {
		return err
	}
	if s.http != nil {
		st := s.http.GatewayStats()
		res.HTTPGateway = &st
	}
	if s.epp != nil || s.http != nil {
		// Only the picker's marks finish requests here: none may be left.
		one := &harness.Replicas{Routers: []*harness.Router{s.router}}
		if res.ActiveAfter, err = one.ActiveAfter(ctx, 3*time.Second); err != nil {
			return err
		}
	}
	if s.reps != nil {
		// Every request was finished (on some replica): what a replica still
		// counts active is load it was never told had ended. With the sync a
		// survivor gets to 0 once it has applied its peers' marks, which a
		// loaded machine delays; the wait ends as soon as it does.
		wait := 3 * time.Second
		if res.Sync {
			wait = time.Minute
		}
		if res.ActiveAfter, err = s.reps.ActiveAfter(ctx, wait); err != nil {
			return err
		}
	}
	if pr.Wall > 0 {
		res.EventsPerSec = float64(res.EventsApplied) / pr.Wall.Seconds()
	}
	return nil
}

// drainEventsApplied polls the router's events_applied until it reaches want,
// stops moving, or 10 s pass.
func drainEventsApplied(ctx context.Context, reg kvrouterv1.RegistryClient, model string, want uint64) (uint64, error) {
	deadline := time.Now().Add(10 * time.Second)
	var last uint64
	for stable := 0; ; {
		n, err := harness.EventsApplied(ctx, reg, model)
		if err != nil {
			return 0, err
		}
		if n == last {
			stable++
		} else {
			stable = 0
		}
		last = n
		if n >= want || stable >= 3 || time.Now().After(deadline) {
			return n, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// splitter marks the KillAt point of a run: it records the engines' counters
// when the request at that index is routed and, in a run with several
// replicas, kills one.
type splitter struct {
	at     int // request index; -1: no split
	fleet  *harness.Fleet
	side   *routerSide
	victim int
	start  time.Time

	once   sync.Once
	done   chan struct{}
	before engine.Stats
	seq    int
	hit    bool // the split point was reached
	fo     *Failover
}

func newSplitter(cfg CompareConfig, v variant, fleet *harness.Fleet, side *routerSide) *splitter {
	sp := &splitter{at: -1, fleet: fleet, side: side, victim: cfg.KillReplica, done: make(chan struct{}), start: time.Now()}
	if cfg.KillAt > 0 && len(cfg.Requests) > 0 {
		sp.at = int(cfg.KillAt * float64(len(cfg.Requests)))
	}
	return sp
}

func (sp *splitter) wrap(choose ChooseFunc) ChooseFunc {
	if sp.at < 0 {
		close(sp.done)
		return choose
	}
	return func(ctx context.Context, seq int, tokens []uint32, id string) (Choice, error) {
		if seq == sp.at { // every seq is chosen once, in no guaranteed order
			sp.once.Do(func() { sp.trigger(seq) })
		}
		return choose(ctx, seq, tokens, id)
	}
}

func (sp *splitter) trigger(seq int) {
	sp.seq, sp.before, sp.hit = seq, sp.fleet.Totals(), true
	if sp.side == nil || sp.side.reps == nil || len(sp.side.reps.Routers) < 2 {
		close(sp.done)
		return
	}
	sp.fo = &Failover{Replica: sp.victim, AtRequest: seq, AtSeconds: time.Since(sp.start).Seconds(),
		RoutesInFlight: sp.side.gw.RoutesInFlight()}
	go func() {
		defer close(sp.done)
		if err := sp.side.reps.KillReplica(sp.victim); err != nil {
			sp.fo.KillError = err.Error()
		}
		// Counted from the moment the process is gone: a Route in flight
		// when the signal was sent may still have been answered, and is
		// counted before once its call returns (Settle; the few Routes
		// started between the kill and Settle are counted before too).
		sp.side.gw.Settle()
		sp.fo.After = sp.side.gw.Stats()
	}()
}

// wait waits for a kill to complete (at once when there was none; a run
// that ended before the split point never triggers).
func (sp *splitter) wait() {
	if sp.at < 0 {
		return
	}
	sp.once.Do(func() { close(sp.done) })
	<-sp.done
}

// fill sets res.Split and res.Failover.
func (sp *splitter) fill(res *PolicyResult, end engine.Stats) {
	if !sp.hit {
		return
	}
	b, e := sp.before, end
	res.Split = &HitSplit{AtRequest: sp.seq, Before: hitRate(b)}
	if d := e.PromptBlocks - b.PromptBlocks; d > 0 {
		res.Split.After = float64(e.CachedBlocks-b.CachedBlocks) / float64(d)
	}
	res.Failover = sp.fo
}

// lagProbe runs MeasureSyncLag during a replay.
type lagProbe struct {
	done chan struct{}
	lag  *SyncLag
	err  error
}

// startLagProbe starts probing, a quarter of the trace's wall time after the
// start, between the first two replicas KillAt leaves alive; it returns a
// probe that reports nothing when the run has no such pair.
func startLagProbe(ctx context.Context, cfg CompareConfig, v variant, side *routerSide) *lagProbe {
	p := &lagProbe{done: make(chan struct{})}
	var pair []*harness.Router
	if side != nil && side.reps != nil && v.sync && cfg.SyncLagProbes > 0 && v.policy == PolicyKV {
		for i, r := range side.reps.Routers {
			if cfg.KillAt > 0 && i == cfg.KillReplica {
				continue
			}
			pair = append(pair, r)
		}
	}
	if len(pair) < 2 || len(cfg.Requests) == 0 {
		close(p.done)
		return p
	}
	span := cfg.Requests[len(cfg.Requests)-1].Arrival
	delay := time.Duration(float64(span) / cfg.SpeedUp / 4)
	go func() {
		defer close(p.done)
		if sleepUntil(ctx, time.Now().Add(delay)) != nil {
			return
		}
		p.lag, p.err = MeasureSyncLag(ctx, pair[0].Router, pair[1].Router, cfg.Model, cfg.SyncLagProbes, 8, cfg.Seed)
	}()
	return p
}

func (p *lagProbe) wait() (*SyncLag, error) {
	<-p.done
	return p.lag, p.err
}
