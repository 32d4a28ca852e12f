package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// PolicyKVEPP routes through the router's endpoint picker (--epp-addr), as
// a gateway with Envoy's ext_proc filter in full duplex would: the gateway
// sends no marks; the picker marks prefill done and finished from the
// response path.
const PolicyKVEPP = "kvrouter-epp"

// EPPGateway plays Envoy's side of ext_proc for the player: one Process
// stream per request, held open while the engine serves it. The request
// path sends the headers and an OpenAI completions body of the token ids in
// 16 KiB chunks, takes the pick from the headers response and checks the
// echoed body; the response path sends the served endpoint, a first body
// chunk when the engine's prefill is done (MarkPrefillDone here) and the
// last when it finishes (MarkFinished). It is a kvrouterv1.RouterClient
// only for those two calls.
type EPPGateway struct {
	kvrouterv1.RouterClient // nil: only the marks below are called

	conn    *grpc.ClientConn
	client  extprocv3.ExternalProcessorClient
	mu      sync.Mutex
	streams map[string]*eppStream
}

type eppStream struct {
	s      extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

// NewEPPGateway connects to the picker at addr.
func NewEPPGateway(addr string) (*EPPGateway, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial endpoint picker: %w", err)
	}
	return &EPPGateway{conn: cc, client: extprocv3.NewExternalProcessorClient(cc), streams: map[string]*eppStream{}}, nil
}

// Close ends every open stream and the connection.
func (g *EPPGateway) Close() {
	g.mu.Lock()
	for id, st := range g.streams {
		st.cancel()
		delete(g.streams, id)
	}
	g.mu.Unlock()
	g.conn.Close()
}

// Chooser routes each request through the picker and maps the endpoint it
// names (the engine's id: the fleet registers sim://<id>) to the fleet.
func (g *EPPGateway) Chooser(f *harness.Fleet, model string) ChooseFunc {
	return func(ctx context.Context, _ int, tokens []uint32, id string) (Choice, error) {
		t0 := time.Now()
		sctx, cancel := context.WithCancel(context.Background()) // outlives the choice
		st, dest, err := g.request(sctx, model, tokens)
		if err != nil {
			cancel()
			return Choice{}, fmt.Errorf("endpoint picker: %w", err)
		}
		lat := time.Since(t0)
		i, ok := f.Index(dest)
		if !ok {
			cancel()
			return Choice{}, fmt.Errorf("endpoint picker chose unknown endpoint %q", dest)
		}
		if err := st.Send(&extprocv3.ProcessingRequest{
			Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: header(":status", "200")}},
			MetadataContext: lbMetadata("x-gateway-destination-endpoint-served", dest),
		}); err != nil {
			cancel()
			return Choice{}, err
		}
		if _, err := st.Recv(); err != nil {
			cancel()
			return Choice{}, err
		}
		g.mu.Lock()
		g.streams[id] = &eppStream{s: st, cancel: cancel}
		g.mu.Unlock()
		return Choice{Engine: i, Routed: true, RouteLatency: lat}, nil
	}
}

// request sends the request path and returns the stream and the pick.
func (g *EPPGateway) request(ctx context.Context, model string, tokens []uint32) (extprocv3.ExternalProcessor_ProcessClient, string, error) {
	body := completionsBody(model, tokens)
	st, err := g.client.Process(ctx)
	if err != nil {
		return nil, "", err
	}
	hm := header(":method", "POST")
	hm.Headers = append(hm.Headers, header(":path", "/v1/completions").Headers[0],
		header("content-length", strconv.Itoa(len(body))).Headers[0])
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}}}); err != nil {
		return nil, "", err
	}
	for off := 0; off < len(body); off += 16 << 10 {
		end := min(off+16<<10, len(body))
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body[off:end], EndOfStream: end == len(body)}}}); err != nil {
			return nil, "", err
		}
	}
	r, err := st.Recv()
	if err != nil {
		return nil, "", err
	}
	if imm := r.GetImmediateResponse(); imm != nil {
		return nil, "", fmt.Errorf("immediate response %d: %s", imm.GetStatus().GetCode(), imm.GetBody())
	}
	dest := ""
	for _, o := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			dest = string(o.GetHeader().GetRawValue())
		}
	}
	var echo []byte
	for {
		r, err := st.Recv()
		if err != nil {
			return nil, "", err
		}
		sr := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		echo = append(echo, sr.GetBody()...)
		if sr.GetEndOfStream() {
			break
		}
	}
	if !bytes.Equal(echo, body) {
		return nil, "", errors.New("the picker's echoed body differs from the request's")
	}
	if u, err := url.Parse(dest); err == nil && u.Host != "" {
		dest = u.Host
	}
	return st, dest, nil
}

// MarkPrefillDone sends the response's first body chunk: the picker marks
// the request's prefill done.
func (g *EPPGateway) MarkPrefillDone(_ context.Context, ref *kvrouterv1.RequestRef, _ ...grpc.CallOption) (*kvrouterv1.Ack, error) {
	return &kvrouterv1.Ack{}, g.respond(ref.GetRequestId(), false)
}

// MarkFinished sends the response's last chunk and ends the stream: the
// picker marks the request finished.
func (g *EPPGateway) MarkFinished(_ context.Context, ref *kvrouterv1.RequestRef, _ ...grpc.CallOption) (*kvrouterv1.Ack, error) {
	return &kvrouterv1.Ack{}, g.respond(ref.GetRequestId(), true)
}

func (g *EPPGateway) respond(id string, last bool) error {
	g.mu.Lock()
	st := g.streams[id]
	if last {
		delete(g.streams, id)
	}
	g.mu.Unlock()
	if st == nil {
		return fmt.Errorf("no open stream for request %s", id)
	}
	chunk := "data: {\"choices\":[{\"text\":\"x\"}]}\n\n"
	if last {
		chunk = "data: [DONE]\n\n"
		defer st.cancel()
	}
	if err := st.s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(chunk), EndOfStream: last}}}); err != nil {
		return err
	}
	if _, err := st.s.Recv(); err != nil { // the chunk echoed
		return err
	}
	if last {
		st.s.CloseSend()
		if _, err := st.s.Recv(); err == nil {
			return errors.New("the picker's stream goes on after the response")
		}
	}
	return nil
}

func completionsBody(model string, tokens []uint32) []byte {
	b := make([]byte, 0, 32+len(model)+7*len(tokens))
	b = append(b, `{"model":`...)
	b = strconv.AppendQuote(b, model)
	b = append(b, `,"prompt":[`...)
	for i, t := range tokens {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(t), 10)
	}
	return append(b, `],"max_tokens":16,"stream":true}`...)
}

func header(k, v string) *corev3.HeaderMap {
	return &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: k, RawValue: []byte(v)}}}
}

func lbMetadata(key, v string) *corev3.Metadata {
	s, _ := structpb.NewStruct(map[string]any{key: v})
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": s}}
}
