// Package restart kills the router with SIGKILL in the middle of a trace
// replay into simulated engines, lets the engines publish on while it is
// down, restarts it on its state directory and checks its index against the
// engines' caches: what `kvbench restart` runs.
//
// The files follow the run: restart.go (the configuration and the setup),
// driver.go (the phases), check.go (polling the router against the
// engines), expect.go (what each rank's restore must be), verdict.go (which
// checks failed) and report.go (the text report).
package restart

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/trace"
)

// Config is one run: a trace replayed into simulated engines, the router
// killed with SIGKILL at a random point, the engines publishing on while it
// is down, the router restarted on its state directory, and its index
// compared with the engines' caches.
type Config struct {
	// Requests is the trace; TraceName says where it came from, for the
	// report. The schedule repeats it as needed.
	Requests  []trace.Request
	TraceName string

	Engines     int
	Capacity    int           // cache capacity per engine, in 16-token blocks
	Buffer      int           // replay buffer of every engine but the short one, in batches
	ShortBuffer int           // replay buffer of engine 0 (0: no short engine)
	SpeedUp     float64       // trace time / wall time
	Seed        uint64        // kill point, fallback choices, samples
	KillMin     time.Duration // kill -9 uniformly in [KillMin, KillMax] after the replay starts
	KillMax     time.Duration
	Downtime    time.Duration // engines publish this long with the router down
	After       time.Duration // live replay after the catch-up check, before the final one
	Snapshot    time.Duration // router --snapshot-interval
	Timeout     time.Duration // bound on restart -> exact (and on the final check)
	Samples     int           // Score prompts per engine
	Policy      string        // PolicyRoute or PolicyRandom
	RouterBin   string
	RouterArgs  []string
	StateDir    string // "" : a fresh temporary directory
	NoState     bool   // no --state-dir / --snapshot-interval (routers without persistence)
	Reregister  bool   // register the fleet again after the restart
	RestartEng  bool   // engine-01 restarts halfway through the downtime
	Keep        bool   // keep the work directory even when the run passes
	WorkRoot    string // parent of the work directory ("": the system's temp dir)
	Model       string
	Format      engine.Format

	// Out receives the report, Progress a timestamped line per phase.
	Out, Progress io.Writer
}

// Placement policies while the router is up (requests are placed at random
// while it is down).
const (
	PolicyRoute  = "route"
	PolicyRandom = "random"
)

// ErrConfig is returned, wrapped, for a Config that cannot run.
var ErrConfig = errors.New("restart: invalid config")

func (c *Config) validate() error {
	switch {
	case len(c.Requests) == 0:
		return fmt.Errorf("%w: empty trace", ErrConfig)
	case c.Engines < 1:
		return fmt.Errorf("%w: %d engines, want at least 1", ErrConfig, c.Engines)
	case c.RestartEng && c.Engines < 2:
		return fmt.Errorf("%w: restarting engine-01 needs at least 2 engines", ErrConfig)
	case c.KillMin <= 0 || c.KillMax < c.KillMin:
		return fmt.Errorf("%w: kill window %v..%v, want 0 < min <= max", ErrConfig, c.KillMin, c.KillMax)
	case c.SpeedUp <= 0 || c.Snapshot <= 0 || c.Timeout <= 0:
		return fmt.Errorf("%w: speed-up, snapshot interval and timeout must be positive", ErrConfig)
	case c.Policy != PolicyRoute && c.Policy != PolicyRandom:
		return fmt.Errorf("%w: policy %q, want %s or %s", ErrConfig, c.Policy, PolicyRoute, PolicyRandom)
	case c.Out == nil || c.Progress == nil:
		return fmt.Errorf("%w: Out and Progress must be set", ErrConfig)
	}
	return nil
}

// Result is what a run measured and concluded.
type Result struct {
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
	Expect         []RankExpect
	Failures       []string
}

// run holds a run's moving parts.
type run struct {
	cfg      Config
	out      io.Writer
	logf     func(string, ...any)
	fleet    *harness.Fleet
	sched    []trace.Request
	orig     []int // sched[i] is the trace's request orig[i]
	workDir  string
	stateDir string
	args     []string
	grpcAddr string
	httpAddr string

	live     atomic.Pointer[harness.Router] // nil while the router is down
	mu       sync.Mutex
	served   [][]int // per engine, schedule indices it served
	routed   atomic.Int64
	fallback atomic.Int64
	routeErr atomic.Int64
}

// Run runs the scenario and writes its report to cfg.Out. A run whose checks
// failed is no error: Result.Failures lists them.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	progress := cfg.Progress
	r := &run{cfg: cfg, out: cfg.Out, served: make([][]int, cfg.Engines)}
	r.logf = func(format string, a ...any) {
		fmt.Fprintf(progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, a...)...)
	}
	// Enough trace for the kill window, the downtime and the live replay after.
	r.sched, r.orig = repeatTrace(cfg.Requests, simOf(cfg.KillMax+cfg.Downtime+cfg.After+5*time.Second, cfg.SpeedUp))

	var err error
	if r.workDir, err = os.MkdirTemp(cfg.WorkRoot, "kvbench-restart-"); err != nil {
		return nil, fmt.Errorf("restart: work directory: %w", err)
	}
	passed := false
	defer func() {
		if passed && !cfg.Keep {
			os.RemoveAll(r.workDir)
		} else {
			fmt.Fprintf(r.out, "work directory kept: %s\n", r.workDir)
		}
	}()
	if err := r.setup(); err != nil {
		return nil, err
	}
	defer r.fleet.Close()

	res, err := r.drive(ctx)
	if err != nil {
		return nil, err
	}
	r.report(res)
	passed = len(res.Failures) == 0
	return res, nil
}

// setup makes the state directory, the router's arguments and the fleet,
// and prints the run's header.
func (r *run) setup() error {
	cfg := r.cfg
	r.stateDir = cfg.StateDir
	if r.stateDir == "" {
		r.stateDir = filepath.Join(r.workDir, "state")
		if err := os.Mkdir(r.stateDir, 0o700); err != nil {
			return fmt.Errorf("restart: state directory: %w", err)
		}
	}
	r.args = append([]string{"--predict=false"}, cfg.RouterArgs...)
	switch {
	case !cfg.NoState:
		r.args = append(r.args, "--state-dir", r.stateDir, "--snapshot-interval", cfg.Snapshot.String())
	case harness.RouterHasFlag(cfg.RouterBin, "state-dir"):
		r.args = append(r.args, "--state-dir", "none") // persistence is on by default
	}

	var err error
	r.fleet, err = harness.StartFleet(harness.FleetConfig{
		Engines: cfg.Engines, Replay: true,
		Engine: engine.Config{CapacityBlocks: cfg.Capacity, Format: cfg.Format, ReplayBuffer: cfg.Buffer},
		Configure: func(i int, c *engine.Config) {
			if i == 0 && cfg.ShortBuffer > 0 {
				c.ReplayBuffer = cfg.ShortBuffer
			}
		},
	})
	if err != nil {
		return fmt.Errorf("restart: fleet: %w", err)
	}
	buf := fmt.Sprintf("replay buffer %d batches", cfg.Buffer)
	if cfg.ShortBuffer > 0 {
		buf = fmt.Sprintf("engine-00's replay buffer %d batches, the others' %d", cfg.ShortBuffer, cfg.Buffer)
	}
	fmt.Fprintf(r.out, "kvbench restart: %d engines x %d blocks, %s; trace %s (%d requests), speed-up %gx, seed %d\n",
		cfg.Engines, cfg.Capacity, buf, cfg.TraceName, len(cfg.Requests), cfg.SpeedUp, cfg.Seed)
	fmt.Fprintf(r.out, "router: %s %s\n", cfg.RouterBin, strings.Join(r.args, " "))
	return nil
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
