package gateway_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvrouter/kvrouter/bench/gateway"
	"github.com/kvrouter/kvrouter/internal/testaddr"
)

// scripted is a picker whose every stream runs script, to test the
// gateway's side of the protocol on answers the real picker never gives.
type scripted struct {
	extprocv3.UnimplementedExternalProcessorServer
	script func(extprocv3.ExternalProcessor_ProcessServer) error
}

func (s *scripted) Process(st extprocv3.ExternalProcessor_ProcessServer) error { return s.script(st) }

func startScripted(t *testing.T, script func(extprocv3.ExternalProcessor_ProcessServer) error) string {
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, &scripted{script: script})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// readRequest reads the request path up to the body's end_of_stream.
func readRequest(st extprocv3.ExternalProcessor_ProcessServer) ([]byte, error) {
	var body []byte
	for {
		m, err := st.Recv()
		if err != nil {
			return nil, err
		}
		if h := m.GetRequestHeaders(); h != nil && h.GetEndOfStream() {
			return nil, nil
		}
		if b := m.GetRequestBody(); b != nil {
			body = append(body, b.GetBody()...)
			if b.GetEndOfStream() {
				return body, nil
			}
		}
	}
}

func headersResponse(dest string, inHeader bool, extra ...string) *extprocv3.ProcessingResponse {
	mut := &extprocv3.HeaderMutation{}
	if inHeader {
		mut.SetHeaders = append(mut.SetHeaders, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: gateway.DestinationHeader, RawValue: []byte(dest)}})
	}
	for i := 0; i+1 < len(extra); i += 2 {
		mut.SetHeaders = append(mut.SetHeaders, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: extra[i], RawValue: []byte(extra[i+1])}})
	}
	r := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: true}}}}
	if !inHeader {
		lb, _ := structpb.NewStruct(map[string]any{gateway.DestinationHeader: dest})
		r.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{gateway.LBNamespace: structpb.NewStructValue(lb)}}
	}
	return r
}

func streamed(request bool, b []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

// echoResponse answers the response path, passing every chunk through f,
// and returns the served endpoint the gateway reported.
func echoResponse(st extprocv3.ExternalProcessor_ProcessServer, f func([]byte) []byte) (string, error) {
	served := ""
	for {
		m, err := st.Recv()
		if err != nil {
			return served, err
		}
		switch {
		case m.GetResponseHeaders() != nil:
			served = m.GetMetadataContext().GetFilterMetadata()[gateway.LBNamespace].GetFields()[gateway.ServedKey].GetStringValue()
			mut := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-picker-saw", RawValue: []byte("response")}}}}
			if err := st.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut}}}}); err != nil {
				return served, err
			}
		case m.GetResponseBody() != nil:
			b := m.GetResponseBody()
			if err := st.Send(streamed(false, f(b.GetBody()), b.GetEndOfStream())); err != nil {
				return served, err
			}
			if b.GetEndOfStream() {
				return served, nil
			}
		}
	}
}

// upstream records the requests it receives and answers "ok".
type upstream struct {
	addr   string
	bodies chan string
	hdrs   chan http.Header
}

func startUpstream(t *testing.T) *upstream {
	u := &upstream{bodies: make(chan string, 8), hdrs: make(chan http.Header, 8)}
	u.addr = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.bodies <- string(b)
		u.hdrs <- r.Header.Clone()
		w.Write([]byte("ok, "))
		http.NewResponseController(w).Flush()
		w.Write([]byte("done"))
	}))
	return u
}

func send(t *testing.T, g *gateway.Gateway, body string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post("http://"+serve(t, g)+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// TestUpstreamGetsOnlyTheEcho: in full duplex the upstream receives the
// body the picker sends back (here rewritten), with the headers the picker
// set, the endpoint served goes back in the response metadata, and the
// client receives the response as the picker echoes it.
func TestUpstreamGetsOnlyTheEcho(t *testing.T) {
	for _, inHeader := range []bool{true, false} {
		up := startUpstream(t)
		servedCh := make(chan string, 1)
		addr := startScripted(t, func(st extprocv3.ExternalProcessor_ProcessServer) error {
			body, err := readRequest(st)
			if err != nil {
				return err
			}
			if string(body) != `{"model":"m"}` {
				return errors.New("the picker got another body")
			}
			st.Send(headersResponse(up.addr, inHeader, "x-picked", "yes"))
			st.Send(streamed(true, []byte("rewrit"), false))
			st.Send(streamed(true, []byte("ten"), true))
			served, err := echoResponse(st, bytes.ToUpper)
			servedCh <- served
			return err
		})
		g, err := gateway.New(gateway.Config{PickerAddr: addr})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		status, h, body := send(t, g, `{"model":"m"}`)
		if status != 200 || body != "OK, DONE" || h.Get("X-Picker-Saw") != "response" {
			t.Fatalf("destination in header %v: status %d, header %v, body %q", inHeader, status, h, body)
		}
		if got := <-up.bodies; got != "rewritten" {
			t.Fatalf("upstream got %q, want the picker's echo", got)
		}
		if got := (<-up.hdrs).Get("X-Picked"); got != "yes" {
			t.Fatalf("upstream header x-picked %q", got)
		}
		if got := <-servedCh; got != up.addr {
			t.Fatalf("served endpoint %q, want %q", got, up.addr)
		}
	}
}

// TestOutOfOrderAnswer: a body answer before the headers answer is a
// protocol error (502), and no upstream is called.
func TestOutOfOrderAnswer(t *testing.T) {
	up := startUpstream(t)
	addr := startScripted(t, func(st extprocv3.ExternalProcessor_ProcessServer) error {
		if _, err := readRequest(st); err != nil {
			return err
		}
		st.Send(streamed(true, []byte(`{"model":"m"}`), true))
		return st.Send(headersResponse(up.addr, true))
	})
	g, err := gateway.New(gateway.Config{PickerAddr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if status, _, body := send(t, g, `{"model":"m"}`); status != 502 {
		t.Fatalf("status %d %q, want 502", status, body)
	}
	if st := g.Stats(); st.ProtocolErrors != 1 || len(up.bodies) != 0 {
		t.Fatalf("stats %+v, upstream calls %d", st, len(up.bodies))
	}
}

// TestFallbackEndpoints: the picker's list is tried in order; a refused
// first endpoint falls to the next.
func TestFallbackEndpoints(t *testing.T) {
	up := startUpstream(t)
	refused, err := testaddr.NewRefused()
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	addr := startScripted(t, func(st extprocv3.ExternalProcessor_ProcessServer) error {
		body, err := readRequest(st)
		if err != nil {
			return err
		}
		st.Send(headersResponse(refused.Addr()+","+up.addr, true))
		st.Send(streamed(true, body, true))
		_, err = echoResponse(st, func(b []byte) []byte { return b })
		return err
	})
	g, err := gateway.New(gateway.Config{PickerAddr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if status, _, body := send(t, g, `{"model":"m"}`); status != 200 || body != "ok, done" {
		t.Fatalf("status %d %q", status, body)
	}
}

// TestImmediateBeforeBodyEnds: the picker may refuse as soon as it has
// the headers, while the gateway is still sending the body.
func TestImmediateBeforeBodyEnds(t *testing.T) {
	addr := startScripted(t, func(st extprocv3.ExternalProcessor_ProcessServer) error {
		if _, err := st.Recv(); err != nil {
			return err
		}
		return st.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
				Body: []byte(`{"error":{"message":"shed"}}`)}}})
	})
	g, err := gateway.New(gateway.Config{PickerAddr: addr, ChunkBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	status, _, body := send(t, g, `{"model":"m","prompt":"`+strings.Repeat("x", 4096)+`"}`)
	if status != 429 || body != `{"error":{"message":"shed"}}` {
		t.Fatalf("status %d %q, want the picker's 429", status, body)
	}
}

// TestPickTimeoutFailsOpen: a picker that never answers is a picker down.
func TestPickTimeoutFailsOpen(t *testing.T) {
	up := startUpstream(t)
	addr := startScripted(t, func(st extprocv3.ExternalProcessor_ProcessServer) error {
		<-st.Context().Done() // never answers
		return nil
	})
	g, err := gateway.New(gateway.Config{PickerAddr: addr, FailOpen: true, Upstreams: []string{up.addr}, PickTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if status, _, body := send(t, g, `{"model":"m"}`); status != 200 || body != "ok, done" {
		t.Fatalf("status %d %q", status, body)
	}
	if got := <-up.bodies; got != `{"model":"m"}` {
		t.Fatalf("failed-open upstream got %q, want the client's body", got)
	}
	if st := g.Stats(); st.FailedOpen != 1 {
		t.Fatalf("stats %+v", st)
	}
}
