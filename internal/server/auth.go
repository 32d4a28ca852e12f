package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Role is what a bearer token may call.
type Role int

// Roles, each allowed what the one before it is.
const (
	// RoleNone is no valid token.
	RoleNone Role = iota
	// RoleGateway may call kvrouter.v1.Router (and reflection).
	RoleGateway
	// RoleOperator may call everything: Router, Registry and reflection.
	RoleOperator
)

func (r Role) String() string {
	switch r {
	case RoleGateway:
		return "gateway"
	case RoleOperator:
		return "operator"
	}
	return "none"
}

// MinTokenLength is the shortest bearer token accepted in a tokens file.
const MinTokenLength = 16

// Services an Auth treats specially.
const (
	routerService     = "kvrouter.v1.Router"
	registryService   = "kvrouter.v1.Registry"
	healthService     = "grpc.health.v1.Health"
	reflectionPrefix  = "grpc.reflection."
	authFailMissing   = "missing"   // no bearer token: Unauthenticated
	authFailInvalid   = "invalid"   // a token that is none of the configured ones: Unauthenticated
	authFailForbidden = "forbidden" // a valid token whose role may not call the service: PermissionDenied
)

// AuthConfig configures an Auth.
type AuthConfig struct {
	// GatewayTokens may call kvrouter.v1.Router; OperatorTokens may call
	// Router and kvrouter.v1.Registry. With neither, auth is off and every
	// call is let through.
	GatewayTokens  []string
	OperatorTokens []string
	// Registerer receives kvrouter_auth_failures_total; nil registers none.
	Registerer prometheus.Registerer
}

// Auth checks the bearer token of each gRPC call against the service it
// calls:
//
//   - grpc.health.v1.Health: open (probes carry no token);
//   - kvrouter.v1.Router: a gateway or an operator token;
//   - kvrouter.v1.Registry: an operator token;
//   - reflection: any valid token;
//   - any other service: an operator token.
//
// A call without a token, or with one that is not configured, answers
// Unauthenticated; a valid token of a role that may not call the service
// answers PermissionDenied. Each is counted in
// kvrouter_auth_failures_total{service,reason}. Tokens are compared in
// constant time (as SHA-256 digests, so their lengths do not leak either)
// and never logged.
type Auth struct {
	tokens   []tokenEntry
	failures *prometheus.CounterVec
}

type tokenEntry struct {
	digest [sha256.Size]byte
	role   Role
}

// NewAuth returns an Auth for cfg.
func NewAuth(cfg AuthConfig) (*Auth, error) {
	a := &Auth{failures: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvrouter_auth_failures_total",
		Help: "gRPC calls refused by authentication, by service and reason: missing or invalid (Unauthenticated), forbidden (PermissionDenied: the token's role may not call the service).",
	}, []string{"service", "reason"})}
	roles := map[[sha256.Size]byte]Role{}
	add := func(toks []string, role Role) error {
		for i, t := range toks {
			if err := checkToken(t); err != nil {
				return fmt.Errorf("auth: %s token %d: %w", role, i+1, err)
			}
			d := sha256.Sum256([]byte(t))
			roles[d] = max(roles[d], role) // a token listed for both is an operator's
		}
		return nil
	}
	if err := add(cfg.GatewayTokens, RoleGateway); err != nil {
		return nil, err
	}
	if err := add(cfg.OperatorTokens, RoleOperator); err != nil {
		return nil, err
	}
	for d, r := range roles {
		a.tokens = append(a.tokens, tokenEntry{d, r})
	}
	if a.Enabled() {
		for _, svc := range []string{routerService, registryService} {
			for _, reason := range []string{authFailMissing, authFailInvalid, authFailForbidden} {
				a.failures.WithLabelValues(svc, reason) // reported at 0 from the start
			}
		}
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(a.failures); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
	}
	return a, nil
}

// checkToken refuses a token too short to be a secret or one a header
// cannot carry unchanged. The error does not quote the token.
func checkToken(t string) error {
	if len(t) < MinTokenLength {
		return fmt.Errorf("shorter than %d characters (use a long random string, e.g. `openssl rand -hex 32`)", MinTokenLength)
	}
	for _, r := range t {
		if r > unicode.MaxASCII || unicode.IsSpace(r) || unicode.IsControl(r) {
			return errors.New("holds whitespace, a control or a non-ASCII character")
		}
	}
	return nil
}

// ReadTokensFile reads bearer tokens from path: one a line; blank lines and
// lines starting with # are skipped, and surrounding whitespace is trimmed.
// A file with no tokens is an error (it would otherwise lock everyone out
// or, worse, be mistaken for auth off). Errors name the file and line, never
// a token.
func ReadTokensFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	var toks []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if err := checkToken(t); err != nil {
			return nil, fmt.Errorf("tokens file %s line %d: token %w", path, line, err)
		}
		toks = append(toks, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("tokens file %s holds no tokens", path)
	}
	return toks, nil
}

// Enabled reports whether any token is configured (else every call is let
// through).
func (a *Auth) Enabled() bool { return len(a.tokens) > 0 }

// HasRole reports whether a token of role r is configured.
func (a *Auth) HasRole(r Role) bool {
	for _, t := range a.tokens {
		if t.role == r {
			return true
		}
	}
	return false
}

// UnaryInterceptor checks each unary call; chain it before the server's own.
func (a *Auth) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := a.authorize(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor checks each streaming call (health Watch, reflection,
// and any streaming RPC to come).
func (a *Auth) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := a.authorize(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// ServerOptions returns the interceptors as grpc.Server options. Put them
// before the server's own options so that they run first.
func (a *Auth) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(a.StreamInterceptor()),
	}
}

// serviceOf is the service part of a full method name "/pkg.Service/Method".
func serviceOf(fullMethod string) string {
	s := strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	return s
}

// required is the least role that may call service; RoleNone: open.
func required(service string) Role {
	switch {
	case service == healthService:
		return RoleNone
	case service == routerService:
		return RoleGateway
	case service == registryService:
		return RoleOperator
	case strings.HasPrefix(service, reflectionPrefix):
		return RoleGateway // any valid token
	}
	return RoleOperator
}

// authorize returns nil if the call may proceed, else its status error.
func (a *Auth) authorize(ctx context.Context, fullMethod string) error {
	if !a.Enabled() {
		return nil
	}
	service := serviceOf(fullMethod)
	need := required(service)
	if need == RoleNone {
		return nil
	}
	tok, ok := bearer(ctx)
	if !ok {
		a.failures.WithLabelValues(service, authFailMissing).Inc()
		return status.Error(codes.Unauthenticated, "missing bearer token: send metadata \"authorization: Bearer <token>\"")
	}
	role := a.roleOf(tok)
	if role == RoleNone {
		a.failures.WithLabelValues(service, authFailInvalid).Inc()
		return status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	if role < need {
		a.failures.WithLabelValues(service, authFailForbidden).Inc()
		return status.Errorf(codes.PermissionDenied, "a %s token may not call %s", role, service)
	}
	return nil
}

// roleOf is the role of tok, RoleNone if it is not configured. It compares
// tok's digest with every configured one, without stopping at a match.
func (a *Auth) roleOf(tok string) Role {
	d := sha256.Sum256([]byte(tok))
	role := RoleNone
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(d[:], a.tokens[i].digest[:]) == 1 {
			role = a.tokens[i].role
		}
	}
	return role
}

// bearer is the token of the call's "authorization: Bearer <token>"
// metadata. More than one authorization value is refused.
func bearer(ctx context.Context) (string, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", false
	}
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return "", false
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}
