// Command kvrouter routes LLM inference requests to the worker whose KV cache
// holds the longest prefix of the prompt. See the README for flags and the API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kvrouter/kvrouter/internal/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // the usage is printed
		}
		fmt.Fprintln(os.Stderr, "kvrouter:", err)
		os.Exit(1)
	}
}

func newLogger(cfg Config, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return nil, fmt.Errorf("config: log_level %q: %w", cfg.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// run starts the router and serves until ctx is done, then drains and stops.
// It listens first and answers health NOT_SERVING (and Unavailable to the
// kvrouter.v1 services) while the state directory's snapshot is restored.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := loadConfig(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	st, err := openStore(cfg, log, reg)
	if err != nil {
		return err
	}
	var store server.RegistryStore
	if st != nil {
		defer st.Close()
		store = registryStore{st.Registry()}
	}
	cm, err := connectCluster(cfg, log, reg)
	if err != nil {
		return err
	}
	scfg := server.Config{Logger: log, Registerer: reg, Store: store}
	if cm != nil {
		defer cm.close(log)
		scfg.Store = clusterRegistry{cm}
		if cfg.NATS.ShareLoad {
			scfg.MarkSync = cm.node.Sync
		}
	}
	srv, err := server.New(scfg)
	if err != nil {
		return err
	}
	s, err := listen(cfg, srv, reg, log)
	if err != nil {
		return err
	}
	errc := s.serve()
	log.Info("kvrouter listening", "grpc", s.grpcLis.Addr().String(), "http", s.httpLis.Addr().String(),
		"block_size", cfg.BlockSize, "workers", len(cfg.Workers), "predict", cfg.Predict,
		"tier_weights", strings.TrimSpace(cfg.TierWeights.String()), "state_dir", cfg.StateDir)

	if cm != nil {
		cm.serveHealth(s.health)
	}
	b, err := startBackend(cfg, st, cm, srv, reg, log)
	if err != nil {
		s.drain(cfg.DrainTimeout, log)
		return err
	}
	defer b.close(log)
	b.waitCaughtUp(ctx, cfg.CatchUpWait, log)
	s.setServing()
	stopSnapshots := b.snapshotEvery(ctx, cfg.SnapshotInterval, log)

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "drain_timeout", cfg.DrainTimeout)
	case serveErr = <-errc:
		log.Error("server failed", "err", serveErr)
	}
	s.drain(cfg.DrainTimeout, log)
	stopSnapshots()
	b.finalSnapshot(log)
	log.Info("stopped")
	return serveErr
}
