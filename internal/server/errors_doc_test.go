package server

import (
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// TestGatewayErrorsDocumented makes a real server answer Route with every
// code it can give a gateway, and checks docs/gateway-errors.md's Route
// table has a row for each; and that every code the table lists is one
// this test produced or one a gateway gets from elsewhere (its transport
// or deadline, the bearer-token check that auth_test.go covers, a bug).
func TestGatewayErrorsDocumented(t *testing.T) {
	e := newEnv(t, func(c *scoring.Config) { c.MaxActivePrefillTokens = 8 * blockSize })
	c := ctx(t)
	if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: "w", Model: "m"}}); err != nil {
		t.Fatal(err)
	}
	// (Each prompt its own tokens: the worker, without events, is routed
	// from predictions, and a predicted prompt has no prefill.)
	base := uint32(0)
	prompt := func(model string, n int) *kvrouterv1.Prompt {
		p := &kvrouterv1.Prompt{Model: model, TokenIds: make([]uint32, n)}
		for i := range p.TokenIds {
			p.TokenIds[i] = base + uint32(i)
		}
		base += 1 << 20
		return p
	}
	produced := map[codes.Code]bool{}
	route := func(req *kvrouterv1.RouteRequest, want codes.Code, text string) {
		t.Helper()
		_, err := e.router.Route(c, req)
		wantCode(t, err, want, text)
		produced[want] = true
	}
	route(&kvrouterv1.RouteRequest{Prompt: prompt("m", 4*blockSize), RequestId: "a"}, codes.OK, "")
	route(&kvrouterv1.RouteRequest{Prompt: prompt("m", 4*blockSize), RequestId: "a"}, codes.AlreadyExists, "already active")
	route(&kvrouterv1.RouteRequest{Prompt: prompt("m", 4*blockSize), RequestId: "b"}, codes.OK, "")
	route(&kvrouterv1.RouteRequest{Prompt: prompt("m", 4*blockSize), RequestId: "c"}, codes.ResourceExhausted, "busy thresholds")
	route(&kvrouterv1.RouteRequest{Prompt: prompt("m", 0)}, codes.InvalidArgument, "empty")
	route(&kvrouterv1.RouteRequest{Prompt: prompt("nope", blockSize)}, codes.NotFound, "nope")
	notReady, err := New(Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = kvrouterv1.NewRouterClient(serveLoopback(t, notReady)).Route(c, &kvrouterv1.RouteRequest{Prompt: prompt("m", blockSize)})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Route before Start: %v; want Unavailable", err)
	}
	produced[codes.Unavailable] = true

	doc, err := os.ReadFile("../../docs/gateway-errors.md")
	if err != nil {
		t.Fatal(err)
	}
	table := regexp.MustCompile("(?s)## Route and RouteStream\n(.*?)\n## ").FindSubmatch(doc)
	if table == nil {
		t.Fatal("docs/gateway-errors.md has no Route and RouteStream section")
	}
	byName := map[string]codes.Code{}
	for code := codes.OK; code <= codes.Unauthenticated; code++ {
		byName[code.String()] = code
	}
	listed := map[codes.Code]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z]+)`").FindAllSubmatch(table[1], -1) {
		code, ok := byName[string(m[1])]
		if !ok {
			t.Fatalf("the table lists %q, not a gRPC code", m[1])
		}
		listed[code] = true
	}
	for code := range produced {
		if !listed[code] {
			t.Errorf("Route answers %v, which docs/gateway-errors.md's Route table does not list", code)
		}
	}
	elsewhere := map[codes.Code]bool{codes.DeadlineExceeded: true, codes.Canceled: true, codes.Unauthenticated: true, codes.PermissionDenied: true, codes.Internal: true}
	for code := range listed {
		if !produced[code] && !elsewhere[code] {
			t.Errorf("docs/gateway-errors.md lists %v for Route, which neither the router nor the transport answers", code)
		}
	}
}
