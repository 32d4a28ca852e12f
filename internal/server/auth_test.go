package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	gatewayTok  = "gateway-token-0123456789"
	operatorTok = "operator-token-0123456789"
)

func newTestAuth(t *testing.T) (*Auth, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	a, err := NewAuth(AuthConfig{GatewayTokens: []string{gatewayTok}, OperatorTokens: []string{operatorTok}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return a, reg
}

func withAuth(v string) context.Context {
	if v == "" {
		return context.Background()
	}
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", v))
}

func TestAuthUnary(t *testing.T) {
	a, _ := newTestAuth(t)
	ic := a.UnaryInterceptor()
	for _, tc := range []struct {
		method, auth string
		want         codes.Code
	}{
		{"/kvrouter.v1.Router/Score", "", codes.Unauthenticated},
		{"/kvrouter.v1.Router/Score", "Bearer wrong-token-0123456789", codes.Unauthenticated},
		{"/kvrouter.v1.Router/Score", "Basic " + gatewayTok, codes.Unauthenticated},
		{"/kvrouter.v1.Router/Score", "Bearer " + gatewayTok[:len(gatewayTok)-1], codes.Unauthenticated},
		{"/kvrouter.v1.Router/Score", "Bearer " + gatewayTok, codes.OK},
		{"/kvrouter.v1.Router/Route", "bearer " + gatewayTok, codes.OK},
		{"/kvrouter.v1.Router/Score", "Bearer " + operatorTok, codes.OK},
		{"/kvrouter.v1.Registry/RegisterWorker", "", codes.Unauthenticated},
		{"/kvrouter.v1.Registry/RegisterWorker", "Bearer " + gatewayTok, codes.PermissionDenied},
		{"/kvrouter.v1.Registry/ListWorkers", "Bearer " + gatewayTok, codes.PermissionDenied},
		{"/kvrouter.v1.Registry/RegisterWorker", "Bearer " + operatorTok, codes.OK},
		{"/grpc.health.v1.Health/Check", "", codes.OK},
		{"/grpc.health.v1.Health/Check", "Bearer nonsense", codes.OK},
		{"/some.Other/Method", "Bearer " + gatewayTok, codes.PermissionDenied},
		{"/some.Other/Method", "Bearer " + operatorTok, codes.OK},
	} {
		called := false
		_, err := ic(withAuth(tc.auth), nil, &grpc.UnaryServerInfo{FullMethod: tc.method}, func(context.Context, any) (any, error) {
			called = true
			return nil, nil
		})
		if status.Code(err) != tc.want || called != (tc.want == codes.OK) {
			t.Errorf("%s with %q: %v (handler called %v); want %v", tc.method, tc.auth, err, called, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), gatewayTok) || strings.Contains(err.Error(), operatorTok)) {
			t.Errorf("error %q quotes a token", err)
		}
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

func TestAuthStream(t *testing.T) {
	a, _ := newTestAuth(t)
	ic := a.StreamInterceptor()
	for _, tc := range []struct {
		method, auth string
		want         codes.Code
	}{
		{"/grpc.health.v1.Health/Watch", "", codes.OK},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "", codes.Unauthenticated},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "Bearer " + gatewayTok, codes.OK},
		{"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "Bearer " + operatorTok, codes.OK},
		{"/kvrouter.v1.Registry/Watch", "Bearer " + gatewayTok, codes.PermissionDenied},
	} {
		called := false
		err := ic(nil, fakeStream{ctx: withAuth(tc.auth)}, &grpc.StreamServerInfo{FullMethod: tc.method}, func(any, grpc.ServerStream) error {
			called = true
			return nil
		})
		if status.Code(err) != tc.want || called != (tc.want == codes.OK) {
			t.Errorf("%s with %q: %v (handler called %v); want %v", tc.method, tc.auth, err, called, tc.want)
		}
	}
}

func TestAuthFailuresCounted(t *testing.T) {
	a, reg := newTestAuth(t)
	ic := a.UnaryInterceptor()
	call := func(method, auth string) {
		_, _ = ic(withAuth(auth), nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, nil })
	}
	call("/kvrouter.v1.Router/Score", "")
	call("/kvrouter.v1.Router/Score", "")
	call("/kvrouter.v1.Router/Score", "Bearer wrong-token-0123456789")
	call("/kvrouter.v1.Registry/RegisterWorker", "Bearer "+gatewayTok)
	call("/kvrouter.v1.Registry/RegisterWorker", "Bearer "+operatorTok)
	call("/grpc.health.v1.Health/Check", "")
	want := `
# HELP kvrouter_auth_failures_total gRPC calls refused by authentication, by service and reason: missing or invalid (Unauthenticated), forbidden (PermissionDenied: the token's role may not call the service).
# TYPE kvrouter_auth_failures_total counter
kvrouter_auth_failures_total{reason="forbidden",service="kvrouter.v1.Registry"} 1
kvrouter_auth_failures_total{reason="forbidden",service="kvrouter.v1.Router"} 0
kvrouter_auth_failures_total{reason="invalid",service="kvrouter.v1.Registry"} 0
kvrouter_auth_failures_total{reason="invalid",service="kvrouter.v1.Router"} 1
kvrouter_auth_failures_total{reason="missing",service="kvrouter.v1.Registry"} 0
kvrouter_auth_failures_total{reason="missing",service="kvrouter.v1.Router"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kvrouter_auth_failures_total"); err != nil {
		t.Fatal(err)
	}
}

func TestAuthOffWithoutTokens(t *testing.T) {
	a, err := NewAuth(AuthConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Enabled() {
		t.Fatal("auth enabled with no tokens")
	}
	_, err = a.UnaryInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/kvrouter.v1.Registry/RegisterWorker"},
		func(context.Context, any) (any, error) { return nil, nil })
	if err != nil {
		t.Fatalf("auth off: %v", err)
	}
}

func TestAuthRolesAndBadTokens(t *testing.T) {
	// A token listed for both roles is an operator's.
	a, err := NewAuth(AuthConfig{GatewayTokens: []string{operatorTok}, OperatorTokens: []string{operatorTok}})
	if err != nil {
		t.Fatal(err)
	}
	if a.roleOf(operatorTok) != RoleOperator || a.HasRole(RoleGateway) {
		t.Fatalf("role of a token in both lists = %v", a.roleOf(operatorTok))
	}
	for _, bad := range []string{"tiny1", "has a space in it 0123456789", "tab\there-0123456789abc"} {
		if _, err := NewAuth(AuthConfig{GatewayTokens: []string{bad}}); err == nil {
			t.Errorf("token %q accepted", bad)
		} else if strings.Contains(err.Error(), bad) {
			t.Errorf("error %q quotes the token", err)
		}
	}
}

func TestReadTokensFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("# gateways\n\n  "+gatewayTok+"  \n"+operatorTok+"\r\n"), 0o600)
	toks, err := ReadTokensFile(good)
	if err != nil || len(toks) != 2 || toks[0] != gatewayTok || toks[1] != operatorTok {
		t.Fatalf("ReadTokensFile = %q, %v", toks, err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("# nothing\n\n"), 0o600)
	if _, err := ReadTokensFile(empty); err == nil || !strings.Contains(err.Error(), empty) {
		t.Errorf("empty file: %v; want an error naming it", err)
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte(gatewayTok+"\nsecret\n"), 0o600)
	if _, err := ReadTokensFile(short); err == nil || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), "secret") {
		t.Errorf("short token: %v; want an error naming line 2 without the token", err)
	}
	if _, err := ReadTokensFile(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v", err)
	}
}
