package epp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// tokens is a completions body whose prompt is n token ids from start.
func tokens(model string, start, n int) string {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = start + i
	}
	b, _ := json.Marshal(map[string]any{"model": model, "prompt": ids, "max_tokens": 8})
	return string(b)
}

func completions(len int) string {
	return fmt.Sprintf("content-length: %d", len)
}

// TestTokenIDsEndToEnd drives one request as Envoy does in full duplex:
// headers, the body in chunks, then the response. The picker answers the
// headers only after the body's end, naming the routed endpoint in the
// header and the metadata, echoes the body byte for byte, and marks
// prefill done at the first response chunk and finished at its end.
func TestTokenIDsEndToEnd(t *testing.T) {
	e := newEnv(t, envOpts{}, worker("w1", "m", "10.0.0.1:8000", 1))
	body := tokens("m", 1, 300)
	v := e.open()
	v.send(reqHeaders(hdrs(false, ":method: POST", ":path: /v1/completions"), nil))
	v.send(reqBody(body[:100], false))
	v.send(reqBody(body[100:200], false))
	v.send(reqBody(body[200:], true))
	dest, cl := picked(t, v.recv())
	if dest != "10.0.0.1:8000" || cl != fmt.Sprint(len(body)) {
		t.Fatalf("dest %q content-length %q, want 10.0.0.1:8000 and %d", dest, cl, len(body))
	}
	if got := v.echoed(); got != body {
		t.Fatalf("echoed body differs from the request's (%d bytes, want %d)", len(got), len(body))
	}
	req := <-e.rec.routes
	if n := len(req.GetPrompt().GetTokenIds()); n != 300 || req.GetPrompt().GetModel() != "m" {
		t.Fatalf("routed %d token ids of model %q, want 300 of m", n, req.GetPrompt().GetModel())
	}
	id := req.GetRequestId()
	if e.router.ActiveRequests() != 1 {
		t.Fatalf("active requests %d, want 1", e.router.ActiveRequests())
	}
	v.send(respHeaders("10.0.0.1:8000", false))
	if r := v.recv(); r.GetResponseHeaders() == nil {
		t.Fatalf("want a response headers response, got %v", r)
	}
	v.send(respBody("data: one", false))
	if got := <-e.rec.marks; got != "prefill "+id {
		t.Fatalf("mark %q, want prefill %s", got, id)
	}
	if r := v.recv(); string(r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()) != "data: one" {
		t.Fatalf("response chunk not echoed: %v", r)
	}
	v.send(respBody("data: [DONE]", true))
	if got := <-e.rec.marks; got != "finished "+id {
		t.Fatalf("mark %q, want finished %s", got, id)
	}
	if r := v.recv(); !r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
		t.Fatalf("last response chunk lacks end_of_stream: %v", r)
	}
	if e.router.ActiveRequests() != 0 {
		t.Fatalf("active requests %d after the response, want 0", e.router.ActiveRequests())
	}
}

// TestLargeBodyRechunked: a body over one chunk comes back in several, in
// order, the content-length the whole.
func TestLargeBodyRechunked(t *testing.T) {
	e := newEnv(t, envOpts{}, worker("w1", "m", "10.0.0.1:8000", 1))
	body := tokens("m", 1000, 30000) // about 180 KB
	v := e.open()
	v.send(reqHeaders(hdrs(false, ":path: /v1/completions", completions(len(body))), nil))
	for i := 0; i < len(body); i += 7000 {
		end := min(i+7000, len(body))
		v.send(reqBody(body[i:end], end == len(body)))
	}
	if _, cl := picked(t, v.recv()); cl != fmt.Sprint(len(body)) {
		t.Fatalf("content-length %q, want %d", cl, len(body))
	}
	if got := v.echoed(); got != body {
		t.Fatalf("echoed body differs")
	}
}

// TestDuplicateEndOfStream: a second body with end_of_stream (Envoy, bodies
// over ~1 MB) is not acted on: no second pick, no second echo.
func TestDuplicateEndOfStream(t *testing.T) {
	e := newEnv(t, envOpts{}, worker("w1", "m", "10.0.0.1:8000", 1))
	body := tokens("m", 1, 64)
	v := e.open()
	v.send(reqHeaders(hdrs(false, ":path: /v1/completions"), nil))
	v.send(reqBody(body, true))
	picked(t, v.recv())
	if v.echoed() != body {
		t.Fatal("echo differs")
	}
	v.send(reqBody("", true))
	v.send(respHeaders("", true))
	// The next answer is the response headers': nothing answered the duplicate.
	if r := v.recv(); r.GetResponseHeaders() == nil {
		t.Fatalf("want the response headers response, got %v", r)
	}
	if got := testutil.ToFloat64(e.picker.m.skipped.WithLabelValues(skipDuplicateEOS)); got != 1 {
		t.Fatalf("duplicate end_of_stream counted %v times, want 1", got)
	}
	if got := testutil.ToFloat64(e.picker.m.requests.WithLabelValues("200")); got != 1 {
		t.Fatalf("picks %v, want 1", got)
	}
}

// TestHeaderOnlyRequest: a request with no body still gets a pick, and no
// body response.
func TestHeaderOnlyRequest(t *testing.T) {
	e := newEnv(t, envOpts{}, worker("w1", "m", "10.0.0.1:8000", 2))
	v := e.open()
	v.send(reqHeaders(hdrs(true, ":method: GET", ":path: /v1/models"), nil))
	dest, cl := picked(t, v.recv())
	if dest != "10.0.0.1:8000" && dest != "10.0.0.1:8001" {
		t.Fatalf("dest %q, want a rank of w1", dest)
	}
	if cl != "" {
		t.Fatalf("content-length %q set for a request with no body", cl)
	}
	v.send(respHeaders("", true))
	if r := v.recv(); r.GetResponseHeaders() == nil {
		t.Fatalf("want the response headers response, got %v", r)
	}
}

// TestRefusals: each bad request is answered with its HTTP status as an
// immediate response, and holds no load.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   envOpts
		hdrs   []string
		subset any
		bodies []string
		want   int
	}{
		{name: "malformed json", bodies: []string{`{"model": "m", "prompt": [1,2`}, want: 400},
		{name: "no model", bodies: []string{`{"prompt": [1,2,3]}`}, want: 400},
		{name: "token id not uint32", bodies: []string{`{"model":"m","prompt":[1,-2]}`}, want: 400},
		{name: "unknown model", bodies: []string{tokens("other", 1, 64)}, want: 404},
		{name: "body over the limit", opts: envOpts{picker: func(c *Config) { c.MaxBodyBytes = 100 }},
			bodies: []string{tokens("m", 1, 20), tokens("m", 1, 20)}, want: 413},
		{name: "content-length over the limit", opts: envOpts{picker: func(c *Config) { c.MaxBodyBytes = 100 }},
			hdrs: []string{"content-length: 101"}, want: 413},
		{name: "subset with no worker", subset: []any{"10.9.9.9:8000"}, bodies: []string{tokens("m", 1, 64)}, want: 503},
		{name: "subset of nothing", subset: " , ", want: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts, worker("w1", "m", "10.0.0.1:8000", 1))
			v := e.open()
			h := append([]string{":path: /v1/completions"}, tc.hdrs...)
			var md = metadataOrNil(tc.subset)
			v.send(reqHeaders(hdrs(false, h...), md))
			for i, b := range tc.bodies {
				// A refusal ends the stream: a later send may find it gone.
				_ = v.stream.Send(reqBody(b, i == len(tc.bodies)-1))
			}
			r := v.recv()
			if got := immediateStatus(r); got != tc.want {
				t.Fatalf("status %d, want %d (%v)", got, tc.want, r)
			}
			if !strings.Contains(string(r.GetImmediateResponse().GetBody()), `"error"`) {
				t.Errorf("body %q is not an OpenAI error", r.GetImmediateResponse().GetBody())
			}
			if _, err := v.stream.Recv(); err == nil {
				t.Fatalf("the stream goes on after an immediate response")
			}
			if n := e.router.ActiveRequests(); n != 0 {
				t.Fatalf("%d active requests after a refusal", n)
			}
		})
	}
}

func metadataOrNil(subset any) *corev3.Metadata {
	if subset == nil {
		return nil
	}
	return metadata(SubsetNamespace, SubsetKey, subset)
}

// TestBusy: every worker over its busy threshold is 503, or 429 when the
// picker sheds.
func TestBusy(t *testing.T) {
	for _, want := range []int{503, 429} {
		t.Run(fmt.Sprint(want), func(t *testing.T) {
			e := newEnv(t, envOpts{
				scoring: func(c *scoring.Config) { c.MaxActivePrefillTokens = 1 },
				picker:  func(c *Config) { c.BusyStatus = want },
			}, worker("w1", "m", "10.0.0.1:8000", 1))
			first := e.open()
			first.send(reqHeaders(hdrs(false, ":path: /v1/completions"), nil))
			first.send(reqBody(tokens("m", 1, 64), true))
			picked(t, first.recv())
			v := e.open()
			v.send(reqHeaders(hdrs(false, ":path: /v1/completions"), nil))
			v.send(reqBody(tokens("m", 1, 64), true))
			if got := immediateStatus(v.recv()); got != want {
				t.Fatalf("status %d, want %d", got, want)
			}
		})
	}
}

// TestSubsetAndRanks: the subset hint, a list or a comma string, with or
// without ports, restricts the pick; rank r of a data-parallel worker is
// its endpoint's port plus r (rank_endpoints: TestRankEndpoint).
func TestSubsetAndRanks(t *testing.T) {
	for _, tc := range []struct {
		subset any
		want   []string // any of
	}{
		{subset: []any{"10.0.0.1:8002"}, want: []string{"10.0.0.1:8002"}},
		{subset: "10.0.0.1:8003, 10.0.0.1:8001", want: []string{"10.0.0.1:8003", "10.0.0.1:8001"}},
		{subset: "10.0.0.1", want: []string{"10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.1:8002", "10.0.0.1:8003"}},
		{subset: []any{"10.0.0.2"}, want: []string{"10.0.0.2:9000"}},
	} {
		t.Run(fmt.Sprint(tc.subset), func(t *testing.T) {
			e := newEnv(t, envOpts{}, worker("w1", "m", "10.0.0.1:8000", 4), worker("w2", "m", "http://10.0.0.2:9000", 1))
			for i := range 6 { // different prompts land on different ranks
				v := e.open()
				v.send(reqHeaders(hdrs(false, ":path: /v1/completions"), metadata(SubsetNamespace, SubsetKey, tc.subset)))
				v.send(reqBody(tokens("m", 1000*i, 64), true))
				dest, _ := picked(t, v.recv())
				if !contains(tc.want, dest) {
					t.Fatalf("request %d: dest %q, want one of %q", i, dest, tc.want)
				}
				v.echoed()
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestConformanceHeader: test-epp-endpoint-selection picks only with the
// flag, and the served endpoint is then copied into the response headers.
func TestConformanceHeader(t *testing.T) {
	for _, flag := range []bool{false, true} {
		t.Run(fmt.Sprint(flag), func(t *testing.T) {
			e := newEnv(t, envOpts{picker: func(c *Config) { c.ConformanceHeader = flag }}, worker("w1", "m", "10.0.0.1:8000", 1))
			v := e.open()
			v.send(reqHeaders(hdrs(false, ":path: /v1/completions", TestSelectionHeader+": 10.0.0.7:8000"), nil))
			v.send(reqBody(tokens("m", 1, 64), true))
			dest, _ := picked(t, v.recv())
			want := map[bool]string{false: "10.0.0.1:8000", true: "10.0.0.7:8000"}[flag]
			if dest != want {
				t.Fatalf("dest %q, want %q", dest, want)
			}
			v.echoed()
			v.send(respHeaders(dest, false))
			served := ""
			for _, o := range v.recv().GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
				if o.GetHeader().GetKey() == ServedTestHeader {
					served = headerValue(o.GetHeader())
				}
			}
			if (served == dest) != flag {
				t.Fatalf("%s = %q with the flag %v", ServedTestHeader, served, flag)
			}
		})
	}
}

// TestStreamEndMarksFinished: a stream cancelled mid-response (the client
// went away) marks the request finished; load is released.
func TestStreamEndMarksFinished(t *testing.T) {
	e := newEnv(t, envOpts{}, worker("w1", "m", "10.0.0.1:8000", 1))
	v := e.open()
	v.send(reqHeaders(hdrs(false, ":path: /v1/completions"), nil))
	v.send(reqBody(tokens("m", 1, 64), true))
	picked(t, v.recv())
	v.echoed()
	id := (<-e.rec.routes).GetRequestId()
	v.cancel()
	if got := <-e.rec.marks; got != "finished "+id {
		t.Fatalf("mark %q, want finished %s", got, id)
	}
}

// TestServedElsewhere: a response served by another endpoint than the pick
// releases the pick's load at once (the router cannot move it).
func TestServedElsewhere(t *testing.T) {
	e := newEnv(t, envOpts{}, worker("w1", "m", "10.0.0.1:8000", 1))
	v := e.open()
	v.send(reqHeaders(hdrs(false, ":path: /v1/completions"), nil))
	v.send(reqBody(tokens("m", 1, 64), true))
	picked(t, v.recv())
	v.echoed()
	id := (<-e.rec.routes).GetRequestId()
	v.send(respHeaders("10.0.0.9:8000", false))
	if got := <-e.rec.marks; got != "finished "+id {
		t.Fatalf("mark %q, want finished %s", got, id)
	}
	v.recv()
	if got := testutil.ToFloat64(e.picker.m.skipped.WithLabelValues(skipServedOther)); got != 1 {
		t.Fatalf("served elsewhere counted %v, want 1", got)
	}
}

// TestOpenAIBody: a text completion or a chat goes to the router whole, as
// openai_body, with its model; the router resolves it (here a fake that
// answers as the text issue's router would).
func TestOpenAIBody(t *testing.T) {
	var got *kvrouterv1.Prompt
	e := newEnv(t, envOpts{router: func(r Router) Router {
		return fakeTokenizer{Router: r, seen: &got}
	}}, worker("w1", "m", "10.0.0.1:8000", 1))
	for _, tc := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"m","prompt":"hello there"}`},
		{"/v1/completions", `{"model":"m","prompt":["hello","there"]}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
	} {
		v := e.open()
		v.send(reqHeaders(hdrs(false, ":path: "+tc.path), nil))
		v.send(reqBody(tc.body, true))
		if dest, _ := picked(t, v.recv()); dest != "10.0.0.1:8000" {
			t.Fatalf("%s: dest %q", tc.path, dest)
		}
		if string(got.GetOpenaiBody()) != tc.body || got.GetModel() != "m" || len(got.GetTokenIds()) != 0 {
			t.Fatalf("%s: routed prompt %v, want the body as openai_body", tc.path, got)
		}
		if v.echoed() != tc.body {
			t.Fatalf("%s: echo differs", tc.path)
		}
	}
}

// fakeTokenizer stands for the router's tokenizers: it turns openai_body
// into token ids (one per byte) before routing.
type fakeTokenizer struct {
	Router
	seen **kvrouterv1.Prompt
}

func (f fakeTokenizer) Route(ctx context.Context, req *kvrouterv1.RouteRequest) (*kvrouterv1.RouteResponse, error) {
	*f.seen = req.GetPrompt()
	p := &kvrouterv1.Prompt{Model: req.GetPrompt().GetModel()}
	for _, c := range req.GetPrompt().GetOpenaiBody() {
		p.TokenIds = append(p.TokenIds, uint32(c))
	}
	return f.Router.Route(ctx, &kvrouterv1.RouteRequest{Prompt: p, RequestId: req.GetRequestId(), MaxCandidates: req.GetMaxCandidates()})
}

// TestMaxStreams: a stream past MaxStreams is answered at once with the
// busy status; the held one is served when let go.
func TestMaxStreams(t *testing.T) {
	e := newEnv(t, envOpts{hold: true, picker: func(c *Config) { c.MaxStreams = 1 }}, worker("w1", "m", "10.0.0.1:8000", 1))
	first := e.open()
	first.send(reqHeaders(hdrs(false, ":path: /v1/completions"), nil))
	first.send(reqBody(tokens("m", 1, 64), true))
	<-e.rec.entered // the first stream holds the only slot
	v := e.open()
	// The picker answers without reading: the send may find the stream
	// already ended (io.EOF), the answer is there all the same.
	_ = v.stream.Send(reqHeaders(hdrs(false, ":path: /v1/completions"), nil))
	if got := immediateStatus(v.recv()); got != 503 {
		t.Fatalf("status %d, want 503", got)
	}
	close(e.rec.hold)
	picked(t, first.recv())
}

// TestNotReady: a router still restoring its index answers 503.
func TestNotReady(t *testing.T) {
	e := newEnv(t, envOpts{router: func(r Router) Router { return notReady{r} }}, worker("w1", "m", "10.0.0.1:8000", 1))
	v := e.open()
	v.send(reqHeaders(hdrs(false, ":path: /v1/completions"), nil))
	v.send(reqBody(tokens("m", 1, 64), true))
	if got := immediateStatus(v.recv()); got != 503 {
		t.Fatalf("status %d, want 503", got)
	}
}

type notReady struct{ Router }

func (notReady) Ready() bool { return false }

// TestTrailersEndTheBody: a body ended by trailers (no end_of_stream) is
// routed at the trailers, echoed without end_of_stream, then the trailers
// are answered.
func TestTrailersEndTheBody(t *testing.T) {
	e := newEnv(t, envOpts{}, worker("w1", "m", "10.0.0.1:8000", 1))
	body := tokens("m", 1, 64)
	v := e.open()
	v.send(reqHeaders(hdrs(false, ":path: /v1/completions"), nil))
	v.send(reqBody(body, false))
	v.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{}}})
	if dest, _ := picked(t, v.recv()); dest != "10.0.0.1:8000" {
		t.Fatalf("dest %q", dest)
	}
	sr := v.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
	if string(sr.GetBody()) != body || sr.GetEndOfStream() {
		t.Fatalf("echo %d bytes, end_of_stream %v; want the body without end_of_stream", len(sr.GetBody()), sr.GetEndOfStream())
	}
	if r := v.recv(); r.GetRequestTrailers() == nil {
		t.Fatalf("want the trailers response, got %v", r)
	}
}

// TestSubsetMovesToCheapest: when the router's choice (the rank caching
// the prompt) is outside the subset hint, the cheapest candidate inside it
// serves: the idle rank, not the one busy with another request.
func TestSubsetMovesToCheapest(t *testing.T) {
	e := newEnv(t, envOpts{scoring: func(c *scoring.Config) { c.Policy = scoring.PolicyBlocks }},
		worker("w1", "m", "10.0.0.1:8000", 1), worker("w2", "m", "10.0.0.2:8000", 1), worker("w3", "m", "10.0.0.3:8000", 1))
	all := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}
	route := func(body string, subset []any) string {
		v := e.open() // held open: its load stays
		var md *corev3.Metadata
		if subset != nil {
			md = metadata(SubsetNamespace, SubsetKey, subset)
		}
		v.send(reqHeaders(hdrs(false, ":path: /v1/completions"), md))
		v.send(reqBody(body, true))
		dest, _ := picked(t, v.recv())
		v.echoed()
		return dest
	}
	x := route(tokens("m", 1, 512), nil) // caches the prompt on x
	var others []any
	for _, ep := range all {
		if ep != x {
			others = append(others, ep)
		}
	}
	y := route(tokens("m", 50000, 2048), nil) // a long request keeps y busy
	if y == x {
		t.Fatalf("the long request went to %q, which holds the first one's load", x)
	}
	want := ""
	for _, ep := range others {
		if ep != y {
			want = ep.(string)
		}
	}
	if got := route(tokens("m", 1, 512), others); got != want {
		t.Fatalf("dest %q, want the idle %q (cached on %q, busy %q)", got, want, x, y)
	}
	if n := testutil.ToFloat64(e.picker.m.skipped.WithLabelValues(skipSubsetMoved)); n != 1 {
		t.Fatalf("subset moves %v, want 1: the router's choice was in the subset, the test did not exercise the move", n)
	}
}
