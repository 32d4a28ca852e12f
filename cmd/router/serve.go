package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/server"
)

// servers are the router's gRPC server (its services, health and
// reflection) and its HTTP server (metrics, health and pprof), with the
// listeners they serve on.
type servers struct {
	grpc    *grpc.Server
	health  *health.Server
	http    *http.Server
	grpcLis net.Listener
	httpLis net.Listener
}

// listen builds the servers for srv and binds their addresses.
func listen(cfg Config, srv *server.Server, reg *prometheus.Registry) (*servers, error) {
	s := &servers{grpc: grpc.NewServer(srv.GRPCOptions()...), health: health.NewServer()}
	srv.RegisterServices(s.grpc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)

	var err error
	if s.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("grpc listen %s: %w", cfg.GRPCAddr, err)
	}
	if s.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		s.grpcLis.Close()
		return nil, fmt.Errorf("http listen %s: %w", cfg.HTTPAddr, err)
	}
	s.http = &http.Server{Handler: httpHandler(reg, s.health), ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// httpHandler serves /metrics from reg, /healthz from the gRPC health
// server's overall status, and /debug/pprof/.
func httpHandler(reg *prometheus.Registry, hs *health.Server) http.Handler {
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
	return mux
}

// closeListeners releases the addresses of servers that never served.
func (s *servers) closeListeners() {
	s.grpcLis.Close()
	s.httpLis.Close()
}

// serve starts both servers, reporting the services NOT_SERVING until
// setServing. A server that stops on its own sends its error on the
// returned channel.
func (s *servers) serve() <-chan error {
	errc := make(chan error, 2)
	go func() { errc <- s.grpc.Serve(s.grpcLis) }()
	go func() {
		if err := s.http.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	s.setStatus(healthpb.HealthCheckResponse_NOT_SERVING)
	return errc
}

// setServing reports the services SERVING.
func (s *servers) setServing() { s.setStatus(healthpb.HealthCheckResponse_SERVING) }

func (s *servers) setStatus(st healthpb.HealthCheckResponse_ServingStatus) {
	for _, svc := range []string{"", kvrouterv1.Router_ServiceDesc.ServiceName, kvrouterv1.Registry_ServiceDesc.ServiceName} {
		s.health.SetServingStatus(svc, st)
	}
}

// drain reports the services not serving, gives in-flight RPCs up to timeout
// to finish before closing them, then gives the HTTP server up to timeout to
// shut down.
func (s *servers) drain(timeout time.Duration, log *slog.Logger) {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		log.Warn("drain timed out; closing remaining RPCs")
		s.grpc.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = s.http.Shutdown(sctx)
}
