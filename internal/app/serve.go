package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// Listener is a server the App runs beside its gRPC and HTTP ones (see
// App.AddListener).
type Listener struct {
	// Name is the listener's name in the log.
	Name string
	// Listener is what Serve serves on; the App closes it if it never
	// serves.
	Listener net.Listener
	// Serve serves on Listener until Shutdown; an error other than one
	// Shutdown causes fails the App. Serve returning http.ErrServerClosed
	// or grpc.ErrServerStopped is not an error.
	Serve func(net.Listener) error
	// Shutdown stops Serve, giving in-flight work until ctx is done.
	Shutdown func(ctx context.Context) error
}

// buildServers builds the gRPC server (TLS and the bearer-token
// interceptors chained before the server's own, the kvrouter.v1 services,
// health, reflection) and the HTTP mux (/metrics, /healthz, and pprof).
func (a *App) buildServers() error {
	auth, err := newAuth(a.cfg.Access, a.reg)
	if err != nil {
		return err
	}
	opts := auth.ServerOptions()
	tlsCfg, err := serverTLS(a.cfg.Access)
	if err != nil {
		return err
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	logAccess(&a.cfg, auth, a.log)
	opts = append(opts, a.srv.GRPCOptions()...)
	a.grpc, a.health = grpc.NewServer(opts...), health.NewServer()
	a.srv.RegisterServices(a.grpc)
	healthpb.RegisterHealthServer(a.grpc, a.health)
	reflection.Register(a.grpc)

	a.mux = http.NewServeMux()
	a.mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg}))
	a.mux.HandleFunc("/healthz", a.healthz)
	if a.cfg.PProf {
		a.mux.HandleFunc("/debug/pprof/", pprof.Index)
		a.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		a.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		a.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		a.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return nil
}

// healthz answers 200 when the overall gRPC health is SERVING, else 503.
func (a *App) healthz(w http.ResponseWriter, _ *http.Request) {
	resp, err := a.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		http.Error(w, "not serving", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// listen binds the gRPC and HTTP addresses, or takes the listeners the
// Config hands over, and puts both servers first in the listeners.
func (a *App) listen() error {
	glis, hlis := a.cfg.GRPCListener, a.cfg.HTTPListener
	var err error
	if glis == nil {
		if glis, err = Listen(a.cfg.GRPCAddr); err != nil {
			return fmt.Errorf("grpc listen %s: %w", a.cfg.GRPCAddr, err)
		}
	}
	if hlis == nil {
		if hlis, err = Listen(a.cfg.HTTPAddr); err != nil {
			glis.Close()
			return fmt.Errorf("http listen %s: %w", a.cfg.HTTPAddr, err)
		}
	}
	httpSrv := &http.Server{Handler: a.mux, ReadHeaderTimeout: 10 * time.Second}
	a.listeners = append([]Listener{
		{Name: "grpc", Listener: glis, Serve: a.grpc.Serve, Shutdown: a.stopGRPC},
		{Name: "http", Listener: hlis, Serve: httpSrv.Serve, Shutdown: httpSrv.Shutdown},
	}, a.listeners...)
	return nil
}

// Listen binds a TCP address, or, for "fd:N", takes the listening socket
// inherited as file descriptor N: a parent process (a test harness) binds
// 127.0.0.1:0 itself and hands the socket over, so no port is picked free
// and then lost to another socket before the router binds it.
func Listen(addr string) (net.Listener, error) {
	fd, ok := strings.CutPrefix(addr, "fd:")
	if !ok {
		return net.Listen("tcp", addr)
	}
	n, err := strconv.Atoi(fd)
	if err != nil || n < 3 {
		return nil, fmt.Errorf("%q: want fd:N, N an inherited descriptor >= 3", addr)
	}
	f := os.NewFile(uintptr(n), "listener-"+fd)
	defer f.Close() // FileListener holds a duplicate
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%q: not a listening socket: %w", addr, err)
	}
	return l, nil
}

// stopGRPC gives in-flight RPCs until ctx is done to finish, then closes
// them.
func (a *App) stopGRPC(ctx context.Context) error {
	done := make(chan struct{})
	go func() { a.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		a.log.Warn("drain timed out; closing remaining RPCs")
		a.grpc.Stop()
	}
	return nil
}

// serve starts every listener's server, reporting the services NOT_SERVING
// until setServing. A server that stops on its own sends its error on the
// returned channel.
func (a *App) serve() <-chan error {
	errc := make(chan error, len(a.listeners))
	for _, l := range a.listeners {
		a.serving.Go(func() {
			err := l.Serve(l.Listener)
			if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("%s: %w", l.Name, err)
			}
		})
	}
	a.setStatus(healthpb.HealthCheckResponse_NOT_SERVING)
	return errc
}

// closeListeners releases the addresses of listeners that never served.
func (a *App) closeListeners() {
	for _, l := range a.listeners {
		l.Listener.Close()
	}
}

// setServing reports the services SERVING.
func (a *App) setServing() { a.setStatus(healthpb.HealthCheckResponse_SERVING) }

func (a *App) setStatus(st healthpb.HealthCheckResponse_ServingStatus) {
	for _, svc := range []string{"", kvrouterv1.Router_ServiceDesc.ServiceName, kvrouterv1.Registry_ServiceDesc.ServiceName} {
		a.health.SetServingStatus(svc, st)
	}
}

// drain reports the services not serving, then shuts every listener's
// server down, each given up to the drain timeout.
func (a *App) drain() {
	a.health.Shutdown()
	for _, l := range a.listeners {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.DrainTimeout)
		if err := l.Shutdown(ctx); err != nil {
			a.log.Warn("shutting down", "listener", l.Name, "err", err)
		}
		cancel()
	}
	a.serving.Wait()
}
