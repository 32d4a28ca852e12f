package app

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/server"
)

// newAuth reads the tokens files o names into a server.Auth (off when it
// names none).
func newAuth(o server.AccessOptions, reg prometheus.Registerer) (*server.Auth, error) {
	var ac server.AuthConfig
	var err error
	if o.RouterTokensFile != "" {
		if ac.GatewayTokens, err = server.ReadTokensFile(o.RouterTokensFile); err != nil {
			return nil, fmt.Errorf("config: router_tokens_file: %w", err)
		}
	}
	if o.RegistryTokensFile != "" {
		if ac.OperatorTokens, err = server.ReadTokensFile(o.RegistryTokensFile); err != nil {
			return nil, fmt.Errorf("config: registry_tokens_file: %w", err)
		}
	}
	ac.Registerer = reg
	return server.NewAuth(ac)
}

// logAccess says at start how the gRPC listener is protected, warning of
// what is open. It never logs a token.
func logAccess(cfg *Config, auth *server.Auth, log *slog.Logger) {
	switch {
	case !auth.Enabled():
		log.Warn("no bearer tokens configured (--router-tokens-file, --registry-tokens-file): anyone who can reach the gRPC address can call kvrouter.v1.Registry and rewrite the worker registry",
			"grpc_addr", cfg.GRPCAddr)
	case !auth.HasRole(server.RoleOperator):
		log.Warn("no operator tokens (--registry-tokens-file): every kvrouter.v1.Registry call is refused")
	}
	o := cfg.Access
	if auth.Enabled() && o.TLSCert == "" {
		log.Warn("bearer tokens without TLS (--tls-cert, --tls-key): tokens cross the network in the clear")
	}
	if o.TLSCert != "" {
		log.Info("gRPC TLS on", "cert", o.TLSCert, "client_ca", o.TLSClientCA, "mtls", o.TLSClientCA != "")
	}
	if cfg.PProf {
		log.Warn("/debug/pprof/ served on the HTTP listener", "http_addr", cfg.HTTPAddr)
	}
}

// serverTLS is the gRPC listener's TLS configuration (nil: plaintext): the
// certificate and key of o, and with tls_client_ca a client certificate
// signed by that CA is required. Errors name the file at fault.
func serverTLS(o server.AccessOptions) (*tls.Config, error) {
	if o.TLSCert == "" {
		return nil, nil
	}
	certPEM, err := os.ReadFile(o.TLSCert)
	if err != nil {
		return nil, fmt.Errorf("config: tls_cert: %w", err)
	}
	keyPEM, err := os.ReadFile(o.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("config: tls_key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("config: tls_cert %s / tls_key %s: %w", o.TLSCert, o.TLSKey, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if o.TLSClientCA != "" {
		caPEM, err := os.ReadFile(o.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("config: tls_client_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("config: tls_client_ca %s: no PEM certificate in it", o.TLSClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
