package app

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvrouter/kvrouter/internal/epp"
	"github.com/kvrouter/kvrouter/internal/server"
)

// eppHealthNames are the services the picker's listener reports SERVING
// once the router serves: what llm-d's and GIE's probes ask for.
var eppHealthNames = []string{"", "readiness", "inference-extension", extprocv3.ExternalProcessor_ServiceDesc.ServiceName}

// eppModule serves the Envoy ext_proc endpoint picker on --epp-addr, with
// gRPC health on the same listener: liveness always, the other names once
// the router serves. TLS is the gRPC listener's; with tokens configured a
// gateway's or an operator's is required.
func eppModule(a *App) error {
	o := a.cfg.EPP
	if o.Addr == "" {
		return nil
	}
	p, err := epp.New(epp.Config{
		Router: a.srv, Fleet: epp.FleetFunc(a.srv.Fleet),
		MaxBodyBytes: o.MaxBodyBytes, MaxStreams: o.MaxStreams, BusyStatus: o.BusyStatus,
		ConformanceHeader: o.ConformanceHeader, Logger: a.log, Registerer: a.reg,
	})
	if err != nil {
		return err
	}
	tok, err := newEPPTokens(a.cfg.Access)
	if err != nil {
		return err
	}
	opts := []grpc.ServerOption{grpc.ChainStreamInterceptor(tok.stream)}
	tlsCfg, err := serverTLS(a.cfg.Access)
	if err != nil {
		return err
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	lis, err := Listen(o.Addr)
	if err != nil {
		return fmt.Errorf("epp listen %s: %w", o.Addr, err)
	}
	gs, hs := grpc.NewServer(opts...), health.NewServer()
	p.Register(gs)
	healthpb.RegisterHealthServer(gs, hs)
	hs.SetServingStatus("liveness", healthpb.HealthCheckResponse_SERVING)
	for _, n := range eppHealthNames {
		hs.SetServingStatus(n, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	a.OnPhase(PhaseServing, func(context.Context) error {
		for _, n := range eppHealthNames {
			hs.SetServingStatus(n, healthpb.HealthCheckResponse_SERVING)
		}
		return nil
	})
	a.AddListener(Listener{Name: "epp", Listener: lis, Serve: gs.Serve, Shutdown: func(ctx context.Context) error {
		hs.Shutdown()
		done := make(chan struct{})
		go func() { gs.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			gs.Stop()
		}
		return nil
	}})
	a.log.Info("endpoint picker (ext_proc) listening", "addr", lis.Addr().String(),
		"max_streams", o.MaxStreams, "max_body_bytes", o.MaxBodyBytes, "tls", tlsCfg != nil, "tokens", len(tok.digests) > 0)
	return nil
}

// EPPAddr is the endpoint picker's address, "" when it is off.
func (a *App) EPPAddr() string { return a.listenerAddr("epp") }

// eppTokens admits a picker stream carrying a gateway's or an operator's
// bearer token; health is open. No tokens configured: every stream.
type eppTokens struct{ digests [][sha256.Size]byte }

func newEPPTokens(o server.AccessOptions) (*eppTokens, error) {
	t := &eppTokens{}
	for _, f := range []string{o.RouterTokensFile, o.RegistryTokensFile} {
		if f == "" {
			continue
		}
		toks, err := server.ReadTokensFile(f)
		if err != nil {
			return nil, fmt.Errorf("config: %s: %w", f, err)
		}
		for _, tk := range toks {
			t.digests = append(t.digests, sha256.Sum256([]byte(tk)))
		}
	}
	return t, nil
}

func (t *eppTokens) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if len(t.digests) == 0 || strings.HasPrefix(info.FullMethod, "/grpc.health.v1.") {
		return h(srv, ss)
	}
	md, _ := metadata.FromIncomingContext(ss.Context())
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return status.Error(codes.Unauthenticated, "missing bearer token: send metadata \"authorization: Bearer <token>\" (Envoy: the ext_proc grpc_service's initial_metadata)")
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return status.Error(codes.Unauthenticated, "authorization is not \"Bearer <token>\"")
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	match := 0
	for i := range t.digests {
		match |= subtle.ConstantTimeCompare(d[:], t.digests[i][:])
	}
	if match == 0 {
		return status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	return h(srv, ss)
}
