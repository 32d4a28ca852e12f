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

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
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

	index := radix.New(radix.Config{Shards: cfg.IndexShards, SegmentBlocks: cfg.IndexSegmentBlocks})
	ing, err := ingest.New(ingest.Config{
		Index:      index,
		BlockSize:  cfg.BlockSize,
		Logger:     log.With("component", "ingest"),
		Registerer: reg,
		QueueDepth: cfg.IngestQueue,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := ing.Close(); err != nil {
			log.Warn("closing subscriptions", "err", err)
		}
	}()
	rt, err := scoring.New(cfg.scoringConfig(index))
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{Router: rt, Ingest: ing, Index: index, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}

	s, err := listen(cfg, srv, reg)
	if err != nil {
		return err
	}
	if err := registerStaticWorkers(srv, cfg.Workers); err != nil {
		s.closeListeners()
		return err
	}
	errc := s.serve()
	log.Info("kvrouter listening", "grpc", s.grpcLis.Addr().String(), "http", s.httpLis.Addr().String(),
		"block_size", cfg.BlockSize, "workers", len(cfg.Workers), "predict", cfg.Predict,
		"tier_weights", strings.TrimSpace(cfg.TierWeights.String()))

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "drain_timeout", cfg.DrainTimeout)
	case serveErr = <-errc:
		log.Error("server failed", "err", serveErr)
	}
	s.drain(cfg.DrainTimeout, log)
	log.Info("stopped")
	return serveErr
}

// registerStaticWorkers registers the config file's workers.
func registerStaticWorkers(srv *server.Server, workers []WorkerConfig) error {
	for i, w := range workers {
		err := srv.Register(&kvrouterv1.Worker{
			WorkerId: w.WorkerID, Model: w.Model, Endpoint: w.Endpoint,
			KvEventsEndpoint: w.KVEventsEndpoint, ReplayEndpoint: w.ReplayEndpoint,
			DpSize: w.DPSize, BlockSize: w.BlockSize, Topic: w.Topic,
		})
		if err != nil {
			return fmt.Errorf("config: workers[%d]: %w", i, err)
		}
	}
	return nil
}
