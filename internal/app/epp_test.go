package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestEPPListener: --epp-addr serves the picker and gRPC health on one
// listener: liveness, then every readiness name SERVING; a stream without
// the configured token is refused, one with a gateway token gets the pick
// (rank 1 of a data-parallel worker: its endpoint's port plus one, for a
// prompt the subset hint sends there).
func TestEPPListener(t *testing.T) {
	cfg, _ := testConfig(t)
	cfg.EPP.Addr = "127.0.0.1:0"
	tokFile := filepath.Join(t.TempDir(), "tokens")
	const token = "gateway-token-0123456789"
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Access.RouterTokensFile = tokFile
	cfg.Workers = []WorkerConfig{{WorkerID: "w", Model: "m", Endpoint: "10.1.0.1:8000", DPSize: 2}}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	cc, err := grpc.NewClient(a.EPPAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "liveness"}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness: %v %v", r, err)
	}
	for _, name := range eppHealthNames {
		watchServing(t, hc, name)
	}

	body := `{"model":"m","prompt":[` + strings.Repeat("7,", 40) + `7]}`
	process := func(ctx context.Context) (*extprocv3.ProcessingResponse, error) {
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second) // bounds a failed test only
		defer scancel()
		s, err := extprocv3.NewExternalProcessorClient(cc).Process(sctx)
		if err != nil {
			return nil, err
		}
		md, _ := metadataSubset("10.1.0.1:8001")
		s.Send(&extprocv3.ProcessingRequest{
			Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}}}}},
			MetadataContext: md,
		})
		s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}})
		return s.Recv()
	}
	if _, err := process(ctx); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("stream without a token: %v, want Unauthenticated", err)
	}
	r, err := process(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token))
	if err != nil {
		t.Fatal(err)
	}
	var dest string
	for _, o := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			dest = string(o.GetHeader().GetRawValue())
		}
	}
	if dest != "10.1.0.1:8001" {
		t.Fatalf("dest %q, want 10.1.0.1:8001 (%v)", dest, r)
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func metadataSubset(eps string) (*corev3.Metadata, error) {
	s, err := structpb.NewStruct(map[string]any{"x-gateway-destination-endpoint-subset": eps})
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb.subset_hint": s}}, err
}

// watchServing watches a health service name until it is SERVING.
func watchServing(t *testing.T, hc healthpb.HealthClient, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: name})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := w.Recv()
		if err != nil {
			t.Fatalf("%q never SERVING: %v", name, err)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
	}
}
