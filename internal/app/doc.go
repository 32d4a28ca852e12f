// Package app is the router as a value: its configuration, the order its
// parts start and stop in, and the points where features plug in. The
// binary (cmd/router) parses flags, handles signals and calls New and Run;
// tests drive an App the same way without the binary.
//
// # Configuration
//
// Config holds the router's own settings and one part per package, each
// owned by its package with its defaults, validation and flags
// (scoring.Options, ingest.Options, radix.Options, persist.Options,
// cluster.Options, server.AccessOptions); their YAML keys are inlined at
// the top level of the file. A feature adds its part as a field of Config
// (a YAML section of its own) and binds its flags in Config.RegisterFlags.
// GRPCListener and HTTPListener hand over listeners a caller bound itself
// (a test binds 127.0.0.1:0 and hands the listener over: no free-port
// probing).
//
// # Start-up
//
// New builds, in order: the log, the metrics registry (Go, process and
// kvrouter_build_info), the state directory (locked), the NATS connection,
// the kvrouter.v1 server, the gRPC server (TLS, token interceptors,
// services, health, reflection) and the HTTP mux (/metrics, /healthz,
// pprof); then it binds the gRPC and HTTP listeners and calls every
// Module. Run then:
//
//  1. serves every listener, health NOT_SERVING; hooks of PhaseListening;
//  2. restores the index (persist.Keeper: the state directory's snapshot,
//     else the cluster's newest), starts ingest, scoring and the server's
//     fleet, registers the workers (the cluster bucket's or the state
//     directory's, then the config file's), drops restored workers no
//     longer registered, collects the other replicas' load; hooks of
//     PhaseStarted;
//  3. waits for every followed rank's catch-up (at most CatchUpWait),
//     reports SERVING, starts the snapshot loop; hooks of PhaseServing;
//  4. at ctx's end: drains every listener, stops App.Go's goroutines,
//     writes the shutdown snapshot, and closes ingest, NATS and the state
//     directory, last opened first.
//
// # Extension points
//
// A feature lives in a file of its own here (epp.go, discovery.go,
// status.go, tokenizer.go) holding a Module: func(*App) error, listed in
// modules() (app.go). New calls it after the servers are built and bound,
// before they serve. From it:
//
//   - GRPCServer(): register gRPC services (before Run serves);
//   - Mux(): add HTTP handlers (e.g. /status) on the HTTP listener;
//   - AddListener(Listener): a server of its own on a listener of its
//     own (an Envoy ext_proc endpoint picker), served by Run and shut
//     down at drain;
//   - Metrics(): the Prometheus registry /metrics serves;
//   - Health(): the gRPC health server, for a service status of its own;
//   - OnPhase(phase, hook): work at a start-up phase (load tokenizers at
//     PhaseListening, start discovery at PhaseStarted); Go(fn) for
//     background work that stops at shutdown; AddCloser(fn) for cleanup;
//   - Registrar(): the workers' lifecycle owner (fleet.Registrar), from
//     PhaseStarted: discovery calls Upsert and Remove with source
//     "discovery"; Fleet() lists the registrations;
//   - Router() and Server(): the scoring router and the kvrouter.v1
//     server, from PhaseStarted, for a feature that routes.
//
// # Workers
//
// Every source of workers goes through internal/fleet: the Registry API
// (server.Server's RPCs), the config file (Upsert, source "config"), the
// cluster's registry bucket (cluster.Node.FollowRegistry) and discovery.
// Precedence is config > api > discovery (see internal/fleet).
package app
