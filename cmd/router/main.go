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
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
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
	weights := [kv.NumTiers]float64{cfg.TierWeights.Device, cfg.TierWeights.Host, cfg.TierWeights.Disk, cfg.TierWeights.External}
	rt, err := scoring.New(scoring.Config{
		Index:                  index,
		BlockSize:              cfg.BlockSize,
		MaxPromptTokens:        cfg.MaxPromptTokens,
		PrefillWeight:          cfg.PrefillWeight,
		TierWeights:            &weights,
		MaxActivePrefillTokens: cfg.MaxActivePrefillTokens,
		MaxActiveDecodeBlocks:  cfg.MaxActiveDecodeBlocks,
		RequestTTL:             cfg.RequestTTL,
		DisablePrediction:      !cfg.Predict,
		PredictionTTL:          cfg.PredictionTTL,
		PredictionCapacity:     cfg.PredictionCapacity,
		PredictionMaxBlocks:    cfg.PredictionMaxBlocks,
		ApproxCapacity:         cfg.ApproxCapacity,
	})
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{Router: rt, Ingest: ing, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}

	gs := grpc.NewServer(srv.GRPCOptions()...)
	srv.RegisterServices(gs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	glis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("grpc listen %s: %w", cfg.GRPCAddr, err)
	}
	hlis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		glis.Close()
		return fmt.Errorf("http listen %s: %w", cfg.HTTPAddr, err)
	}

	for i, w := range cfg.Workers {
		err := srv.Register(&kvrouterv1.Worker{
			WorkerId: w.WorkerID, Model: w.Model, Endpoint: w.Endpoint,
			KvEventsEndpoint: w.KVEventsEndpoint, ReplayEndpoint: w.ReplayEndpoint,
			DpSize: w.DPSize, BlockSize: w.BlockSize, Topic: w.Topic,
		})
		if err != nil {
			glis.Close()
			hlis.Close()
			return fmt.Errorf("config: workers[%d]: %w", i, err)
		}
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		resp, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(glis) }()
	go func() {
		if err := hsrv.Serve(hlis); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	for _, svc := range []string{"", kvrouterv1.Router_ServiceDesc.ServiceName, kvrouterv1.Registry_ServiceDesc.ServiceName} {
		hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	}
	log.Info("kvrouter listening", "grpc", glis.Addr().String(), "http", hlis.Addr().String(),
		"block_size", cfg.BlockSize, "workers", len(cfg.Workers), "predict", cfg.Predict,
		"tier_weights", strings.TrimSpace(cfg.TierWeights.String()))

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "drain_timeout", cfg.DrainTimeout)
	case serveErr = <-errc:
		log.Error("server failed", "err", serveErr)
	}
	hs.Shutdown()
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.DrainTimeout):
		log.Warn("drain timed out; closing remaining RPCs")
		gs.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cancel()
	_ = hsrv.Shutdown(sctx)
	log.Info("stopped")
	return serveErr
}
