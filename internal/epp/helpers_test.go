package epp

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
)

const testBlockSize = 16

// env is a router (scoring, ingest, server) with an endpoint picker in
// front of it, served on loopback, and go-control-plane's ext_proc client.
type env struct {
	t      *testing.T
	srv    *server.Server
	router *scoring.Router
	rec    *recRouter
	picker *Picker
	client extprocv3.ExternalProcessorClient
}

// recRouter is the server, recording the marks the picker sends on a
// channel and, with hold set, holding each Route until released.
type recRouter struct {
	Router
	marks   chan string // "prefill <id>" or "finished <id>"
	routes  chan *kvrouterv1.RouteRequest
	entered chan struct{}
	hold    chan struct{}
}

func (r *recRouter) Route(ctx context.Context, req *kvrouterv1.RouteRequest) (*kvrouterv1.RouteResponse, error) {
	if r.hold != nil {
		r.entered <- struct{}{}
		<-r.hold
	}
	select {
	case r.routes <- req:
	default:
	}
	return r.Router.Route(ctx, req)
}

// The marks are recorded once the router applied them.

func (r *recRouter) MarkPrefillDone(ctx context.Context, ref *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	defer func() { r.marks <- "prefill " + ref.GetRequestId() }()
	return r.Router.MarkPrefillDone(ctx, ref)
}

func (r *recRouter) MarkFinished(ctx context.Context, ref *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	defer func() { r.marks <- "finished " + ref.GetRequestId() }()
	return r.Router.MarkFinished(ctx, ref)
}

type envOpts struct {
	scoring func(*scoring.Config)
	picker  func(*Config)
	router  func(Router) Router // wraps the recording router
	hold    bool
}

func newEnv(t *testing.T, o envOpts, workers ...*kvrouterv1.Worker) *env {
	t.Helper()
	idx := radix.New(radix.Config{})
	reg := prometheus.NewRegistry()
	ing, err := ingest.New(ingest.Config{Index: idx, BlockSize: testBlockSize, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ing.Close() })
	scfg := scoring.Config{Index: idx, BlockSize: testBlockSize, Seed: 1, Policy: scoring.PolicyBlocks}
	if o.scoring != nil {
		o.scoring(&scfg)
	}
	rt, err := scoring.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Router: rt, Ingest: ing, Index: idx, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		if err := srv.Register(w, server.SourceAPI, false); err != nil {
			t.Fatal(err)
		}
	}
	rec := &recRouter{Router: srv, marks: make(chan string, 64), routes: make(chan *kvrouterv1.RouteRequest, 64)}
	if o.hold {
		rec.entered, rec.hold = make(chan struct{}), make(chan struct{})
	}
	var r Router = rec
	if o.router != nil {
		r = o.router(rec)
	}
	pcfg := Config{Router: r, Fleet: FleetFunc(srv.Fleet), RequestIDPrefix: "t-", Registerer: reg}
	if o.picker != nil {
		o.picker(&pcfg)
	}
	p, err := New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	p.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &env{t: t, srv: srv, router: rt, rec: rec, picker: p, client: extprocv3.NewExternalProcessorClient(cc)}
}

// worker is an approximate worker (no KV events) of model m.
func worker(id, m, endpoint string, dp uint32) *kvrouterv1.Worker {
	return &kvrouterv1.Worker{WorkerId: id, Model: m, Endpoint: endpoint, DpSize: dp, BlockSize: testBlockSize}
}

// envoy plays Envoy's side of one Process stream.
type envoy struct {
	t      *testing.T
	stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

func (e *env) open() *envoy {
	// The deadline only ends a stream a failed test leaves waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	e.t.Cleanup(cancel)
	s, err := e.client.Process(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return &envoy{t: e.t, stream: s, cancel: cancel}
}

func (v *envoy) send(req *extprocv3.ProcessingRequest) {
	v.t.Helper()
	if err := v.stream.Send(req); err != nil {
		v.t.Fatal(err)
	}
}

func (v *envoy) recv() *extprocv3.ProcessingResponse {
	v.t.Helper()
	r, err := v.stream.Recv()
	if err != nil {
		v.t.Fatalf("recv: %v", err)
	}
	return r
}

// hdrs is HttpHeaders of "key: value" lines, values in raw_value as Envoy
// sends them.
func hdrs(eos bool, kv ...string) *extprocv3.HttpHeaders {
	hm := &corev3.HeaderMap{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, ": ")
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return &extprocv3.HttpHeaders{Headers: hm, EndOfStream: eos}
}

func reqHeaders(h *extprocv3.HttpHeaders, md *corev3.Metadata) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: h},
		MetadataContext: md,
		ProtocolConfig: &extprocv3.ProtocolConfiguration{
			// Envoy 1.38.1 and agentgateway report false in full duplex.
			SendBodyWithoutWaitingForHeaderResponse: false,
		},
	}
}

func reqBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func respHeaders(served string, eos bool) *extprocv3.ProcessingRequest {
	var md *corev3.Metadata
	if served != "" {
		md = metadata(LBNamespace, ServedKey, served)
	}
	return &extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: hdrs(eos, ":status: 200")},
		MetadataContext: md,
	}
}

func respBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

// metadata is filter metadata ns.key = v (a string, or a []any list).
func metadata(ns, key string, v any) *corev3.Metadata {
	s, err := structpb.NewStruct(map[string]any{key: v})
	if err != nil {
		panic(err)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ns: s}}
}

// picked reads a request headers response: the destination header (checked
// equal to the dynamic metadata's, with the route cache cleared) and the
// content-length set ("" when none).
func picked(t *testing.T, r *extprocv3.ProcessingResponse) (dest, contentLength string) {
	t.Helper()
	h := r.GetRequestHeaders()
	if h == nil {
		t.Fatalf("want a request headers response, got %v", r)
	}
	if !h.GetResponse().GetClearRouteCache() {
		t.Errorf("clear_route_cache is false")
	}
	for _, o := range h.GetResponse().GetHeaderMutation().GetSetHeaders() {
		switch o.GetHeader().GetKey() {
		case DestinationHeader:
			dest = headerValue(o.GetHeader())
		case "content-length":
			contentLength = headerValue(o.GetHeader())
		}
	}
	md := r.GetDynamicMetadata().GetFields()[LBNamespace].GetStructValue().GetFields()[DestinationHeader].GetStringValue()
	if md != dest {
		t.Errorf("dynamic metadata %s.%s = %q, header %q", LBNamespace, DestinationHeader, md, dest)
	}
	return dest, contentLength
}

// echoed reads request body responses until one ends the stream, and
// returns the body they carry.
func (v *envoy) echoed() string {
	v.t.Helper()
	var b strings.Builder
	for {
		r := v.recv()
		sr := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			v.t.Fatalf("want a streamed request body response, got %v", r)
		}
		b.Write(sr.GetBody())
		if sr.GetEndOfStream() {
			return b.String()
		}
	}
}

// immediateStatus is an immediate response's HTTP status, 0 for another
// response.
func immediateStatus(r *extprocv3.ProcessingResponse) int {
	return int(r.GetImmediateResponse().GetStatus().GetCode())
}
