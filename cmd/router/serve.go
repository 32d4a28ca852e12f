package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
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

// listen builds the servers for srv and binds their addresses. The gRPC
// server gets TLS and the bearer-token interceptors cfg asks for, the auth
// interceptors chained before the server's own.
func listen(cfg Config, srv *server.Server, reg *prometheus.Registry, log *slog.Logger) (*servers, error) {
	auth, err := newAuth(cfg, reg, log)
	if err != nil {
		return nil, err
	}
	opts := auth.ServerOptions()
	tlsCfg, err := serverTLS(cfg)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	logAccess(cfg, auth, log)
	opts = append(opts, srv.GRPCOptions()...)
	s := &servers{grpc: grpc.NewServer(opts...), health: health.NewServer()}
	srv.RegisterServices(s.grpc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)

	if s.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("grpc listen %s: %w", cfg.GRPCAddr, err)
	}
	if s.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		s.grpcLis.Close()
		return nil, fmt.Errorf("http listen %s: %w", cfg.HTTPAddr, err)
	}
	s.http = &http.Server{Handler: httpHandler(reg, s.health, cfg.PProf), ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// newAuth reads the tokens files cfg names into a server.Auth (off when it
// names none).
func newAuth(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*server.Auth, error) {
	var ac server.AuthConfig
	var err error
	if cfg.RouterTokensFile != "" {
		if ac.GatewayTokens, err = server.ReadTokensFile(cfg.RouterTokensFile); err != nil {
			return nil, fmt.Errorf("config: router_tokens_file: %w", err)
		}
	}
	if cfg.RegistryTokensFile != "" {
		if ac.OperatorTokens, err = server.ReadTokensFile(cfg.RegistryTokensFile); err != nil {
			return nil, fmt.Errorf("config: registry_tokens_file: %w", err)
		}
	}
	ac.Registerer = reg
	return server.NewAuth(ac)
}

// logAccess says at start how the gRPC listener is protected, warning of
// what is open. It never logs a token.
func logAccess(cfg Config, auth *server.Auth, log *slog.Logger) {
	switch {
	case !auth.Enabled():
		log.Warn("no bearer tokens configured (--router-tokens-file, --registry-tokens-file): anyone who can reach the gRPC address can call kvrouter.v1.Registry and rewrite the worker registry",
			"grpc_addr", cfg.GRPCAddr)
	case !auth.HasRole(server.RoleOperator):
		log.Warn("no operator tokens (--registry-tokens-file): every kvrouter.v1.Registry call is refused")
	}
	if auth.Enabled() && cfg.TLSCert == "" {
		log.Warn("bearer tokens without TLS (--tls-cert, --tls-key): tokens cross the network in the clear")
	}
	if cfg.TLSCert != "" {
		log.Info("gRPC TLS on", "cert", cfg.TLSCert, "client_ca", cfg.TLSClientCA, "mtls", cfg.TLSClientCA != "")
	}
	if cfg.PProf {
		log.Warn("/debug/pprof/ served on the HTTP listener", "http_addr", cfg.HTTPAddr)
	}
}

// serverTLS is the gRPC listener's TLS configuration (nil: plaintext): the
// certificate and key of cfg, and with tls_client_ca a client certificate
// signed by that CA is required. Errors name the file at fault.
func serverTLS(cfg Config) (*tls.Config, error) {
	if cfg.TLSCert == "" {
		return nil, nil
	}
	certPEM, err := os.ReadFile(cfg.TLSCert)
	if err != nil {
		return nil, fmt.Errorf("config: tls_cert: %w", err)
	}
	keyPEM, err := os.ReadFile(cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("config: tls_key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("config: tls_cert %s / tls_key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.TLSClientCA != "" {
		caPEM, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("config: tls_client_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("config: tls_client_ca %s: no PEM certificate in it", cfg.TLSClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// httpHandler serves /metrics from reg, /healthz from the gRPC health
// server's overall status, and /debug/pprof/ when withPProf.
func httpHandler(reg *prometheus.Registry, hs *health.Server, withPProf bool) http.Handler {
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
	if !withPProf {
		return mux
	}
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
