package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
)

// Module wires a feature into an App. New calls each after the gRPC
// server, the HTTP mux and the metrics registry exist and the gRPC and
// HTTP listeners are bound, before anything serves: it registers
// services, handlers, listeners and phase hooks. A
// feature its Config leaves off returns nil having done nothing.
type Module func(a *App) error

// modules are the features wired into every App, in this order, before
// Config.Modules. A feature's file adds its Module here.
func modules() []Module { return []Module{statusModule, tokenizerModule, eppModule, discoveryModule} }

// Phase is a point of the start-up that hooks run at (see OnPhase).
type Phase int

// Start-up phases, in order.
const (
	// PhaseListening: the servers listen and answer NOT_SERVING (the
	// kvrouter.v1 services Unavailable); the index is not restored yet.
	PhaseListening Phase = iota
	// PhaseStarted: the index is restored, the router, ingest and the
	// fleet run, the config file's and the stored workers are
	// registered; Fleet, Server and Router are set. Readiness waits.
	PhaseStarted
	// PhaseServing: health reports SERVING.
	PhaseServing
	numPhases
)

// Hook runs at a phase of Run. ctx is done when the App shuts down; work
// a hook starts in the background goes through App.Go. An error stops the
// start-up and is Run's.
type Hook func(ctx context.Context) error

// App is a router: its servers, its state and the order they start and
// stop in. New builds it and binds its listeners; Run serves.
type App struct {
	cfg Config
	log *slog.Logger
	reg *prometheus.Registry

	grpc      *grpc.Server
	health    *health.Server
	mux       *http.ServeMux
	listeners []Listener
	serving   sync.WaitGroup

	srv     *server.Server
	store   *persist.Store // nil: persistence off
	cluster *clusterMode   // nil: a single router
	hooks   [numPhases][]Hook
	bg      sync.WaitGroup // App.Go's goroutines
	bgCtx   context.Context
	bgStop  context.CancelFunc

	// Set at PhaseStarted.
	index  *radix.Index
	ingest *ingest.Manager
	router *scoring.Router

	closers []func() // run in reverse by close
}

// New builds the App of cfg: the log, the metrics, the state directory
// (locked), the NATS connection, the servers and the modules, and binds
// the listeners. Run serves; an App that never runs is released by Close.
func New(cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := cfg.LogOutput
	if out == nil {
		out = os.Stderr
	}
	log, err := newLogger(&cfg, out)
	if err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, log: log, reg: prometheus.NewRegistry()}
	a.bgCtx, a.bgStop = context.WithCancel(context.Background())
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfoCollector(BuildVersion()))
	if err := a.build(); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

func (a *App) build() error {
	if err := a.openStore(); err != nil {
		return err
	}
	if err := a.connectCluster(); err != nil {
		return err
	}
	scfg := server.Config{Logger: a.log, Registerer: a.reg}
	if a.store != nil {
		scfg.Store = registryStore{a.store.Registry()}
	}
	if a.cluster != nil {
		scfg.Store = a.cluster.registry()
		if a.cfg.Cluster.NATS.ShareLoad {
			scfg.MarkSync = a.cluster.node.Sync
		}
	}
	srv, err := server.New(scfg)
	if err != nil {
		return err
	}
	a.srv = srv
	if err := a.buildServers(); err != nil {
		return err
	}
	if err := a.listen(); err != nil {
		return err
	}
	for _, m := range append(modules(), a.cfg.Modules...) {
		if err := m(a); err != nil {
			return err
		}
	}
	return nil
}

// Close releases what New took (the listeners, handed over or bound, the
// state directory's lock, the NATS connection) when Run is not called.
func (a *App) Close() {
	a.closeListeners()
	if len(a.listeners) == 0 { // New failed before taking them over
		for _, l := range []net.Listener{a.cfg.GRPCListener, a.cfg.HTTPListener} {
			if l != nil {
				l.Close()
			}
		}
	}
	a.close()
}

func (a *App) close() {
	a.bgStop()
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// Run serves until ctx is done, then drains and stops. It listens first
// and answers health NOT_SERVING (and Unavailable to the kvrouter.v1
// services) while the index is restored and the fleet registered, and
// SERVING once every followed rank caught up (at most CatchUpWait).
func (a *App) Run(ctx context.Context) error {
	defer a.close()
	errc := a.serve()
	a.log.Info("kvrouter listening", "grpc", a.GRPCAddr(), "http", a.HTTPAddr(),
		"block_size", a.cfg.Scoring.BlockSize, "workers", len(a.cfg.Workers), "predict", a.cfg.Scoring.Predict,
		"tier_weights", strings.TrimSpace(a.cfg.Scoring.TierWeights.String()), "state_dir", a.cfg.Persist.StateDir,
		"version", BuildVersion().Version)
	if a.cluster != nil {
		a.cluster.serveHealth(a.health)
	}
	keeper, err := a.start(ctx)
	if err != nil {
		a.drain()
		a.stopBackground()
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
		a.log.Info("shutting down", "drain_timeout", a.cfg.DrainTimeout)
	case serveErr = <-errc:
		a.log.Error("server failed", "err", serveErr)
	}
	a.drain()
	a.stopBackground()
	keeper.Final(a.index, a.ingest)
	a.log.Info("stopped")
	return serveErr
}

// start runs the start-up phases and the periodic snapshots.
func (a *App) start(ctx context.Context) (*persist.Keeper, error) {
	if err := a.runHooks(ctx, PhaseListening); err != nil {
		return nil, err
	}
	keeper, err := a.startBackend(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.runHooks(ctx, PhaseStarted); err != nil {
		return nil, err
	}
	a.waitCaughtUp(ctx)
	a.setServing()
	a.Go(func(ctx context.Context) { keeper.Run(ctx, a.cfg.Persist.SnapshotInterval, a.index, a.ingest) })
	return keeper, a.runHooks(ctx, PhaseServing)
}

func (a *App) runHooks(ctx context.Context, p Phase) error {
	for _, h := range a.hooks[p] {
		if err := h(ctx); err != nil {
			return err
		}
	}
	return nil
}

// stopBackground ends App.Go's goroutines and waits for them.
func (a *App) stopBackground() {
	a.bgStop()
	a.bg.Wait()
}

// Extension points.

// OnPhase adds a hook run at phase p, after those added before it.
func (a *App) OnPhase(p Phase, h Hook) {
	if p < 0 || p >= numPhases {
		panic(fmt.Sprintf("app: OnPhase(%d): no such phase", p))
	}
	a.hooks[p] = append(a.hooks[p], h)
}

// Go runs fn in a goroutine whose ctx is done when the App shuts down
// (after the servers drain, before the shutdown snapshot); Run waits for
// it.
func (a *App) Go(fn func(ctx context.Context)) {
	a.bg.Go(func() { fn(a.bgCtx) })
}

// AddListener adds a server that Run serves beside gRPC and HTTP, and
// shuts down at drain. Call it from a Module.
func (a *App) AddListener(l Listener) { a.listeners = append(a.listeners, l) }

// AddCloser adds fn to what the App runs when it stops, after the
// shutdown snapshot (before what was added earlier).
func (a *App) AddCloser(fn func()) { a.closers = append(a.closers, fn) }

// GRPCServer is the gRPC server: register services on it from a Module.
func (a *App) GRPCServer() *grpc.Server { return a.grpc }

// Mux is the HTTP listener's mux: add handlers to it from a Module.
func (a *App) Mux() *http.ServeMux { return a.mux }

// Metrics is the Prometheus registry /metrics serves.
func (a *App) Metrics() *prometheus.Registry { return a.reg }

// Health is the gRPC health server (the overall status and the kvrouter.v1
// services' are the App's; a module may report services of its own).
func (a *App) Health() *health.Server { return a.health }

// Logger is the App's log.
func (a *App) Logger() *slog.Logger { return a.log }

// Config is the App's configuration.
func (a *App) Config() *Config { return &a.cfg }

// Server serves the kvrouter.v1 services.
func (a *App) Server() *server.Server { return a.srv }

// Registrar is the owner of the workers' lifecycle that every source of
// workers calls; nil before PhaseStarted.
func (a *App) Registrar() fleet.Registrar {
	if f := a.srv.Fleet(); f != nil {
		return f
	}
	return nil
}

// Fleet is the registry itself (Registered, List), nil before
// PhaseStarted.
func (a *App) Fleet() *fleet.Fleet { return a.srv.Fleet() }

// Router is the scoring router, nil before PhaseStarted.
func (a *App) Router() *scoring.Router { return a.router }

// GRPCAddr and HTTPAddr are the addresses the App listens on.
func (a *App) GRPCAddr() string { return a.listenerAddr("grpc") }

// HTTPAddr is the HTTP listener's address.
func (a *App) HTTPAddr() string { return a.listenerAddr("http") }

func (a *App) listenerAddr(name string) string {
	for _, l := range a.listeners {
		if l.Name == name {
			return l.Listener.Addr().String()
		}
	}
	return ""
}
