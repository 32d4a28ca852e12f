package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/gateway"
	"github.com/kvrouter/kvrouter/internal/epp"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
	"github.com/kvrouter/kvrouter/internal/testaddr"
)

// markRec is the router as the picker sees it, recording the marks it
// receives: the gateway itself has no router client, so every mark comes
// from the picker.
type markRec struct {
	*server.Server
	mu    sync.Mutex
	marks map[string][]string
}

func (m *markRec) MarkPrefillDone(ctx context.Context, ref *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	m.record(ref.GetRequestId(), "prefill")
	return m.Server.MarkPrefillDone(ctx, ref)
}

func (m *markRec) MarkFinished(ctx context.Context, ref *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	m.record(ref.GetRequestId(), "finished")
	return m.Server.MarkFinished(ctx, ref)
}

func (m *markRec) record(id, what string) {
	m.mu.Lock()
	m.marks[id] = append(m.marks[id], what)
	m.mu.Unlock()
}

func (m *markRec) all() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for k, v := range m.marks {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// env is a router with its picker in process, two simulated engines behind
// OpenAI fronts registered under their HTTP addresses, and the gateway.
type env struct {
	t      testing.TB
	rt     *scoring.Router
	marks  *markRec
	gw     *gateway.Gateway
	url    string
	fronts []string
	served chan int // the front that received each request
}

func newEnv(t testing.TB, pickerCfg func(*epp.Config), gwCfg func(*gateway.Config)) *env {
	return newEnvWith(t, nil, pickerCfg, gwCfg)
}

// newEnvWith is newEnv with each engine's backend made by backend (nil:
// Timed, the engine's own timing).
func newEnvWith(t testing.TB, backend func(*engine.Engine) engine.Backend, pickerCfg func(*epp.Config), gwCfg func(*gateway.Config)) *env {
	t.Helper()
	idx := radix.New(radix.Config{})
	ing, err := ingest.New(ingest.Config{Index: idx, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ing.Close() })
	rt, err := scoring.New(scoring.Config{Index: idx, BlockSize: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Router: rt, Ingest: ing, Index: idx})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, rt: rt, marks: &markRec{Server: srv, marks: map[string][]string{}}, served: make(chan int, 64)}
	for i := 0; i < 2; i++ {
		eng, err := engine.New(engine.Config{ID: fmt.Sprintf("e%d", i), CapacityBlocks: 1000,
			PrefillPerToken: time.Millisecond, DecodePerToken: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		var b engine.Backend = &engine.Timed{Engine: eng, T0: time.Now(), SpeedUp: 100}
		if backend != nil {
			b = backend(eng)
		}
		front, err := engine.NewOpenAIServer(engine.OpenAIConfig{Ranks: []engine.Backend{b}})
		if err != nil {
			t.Fatal(err)
		}
		h := front.Handler(0)
		addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			e.served <- i
			h.ServeHTTP(w, r)
		}))
		e.fronts = append(e.fronts, addr)
		w := &kvrouterv1.Worker{WorkerId: eng.ID(), Model: "m", Endpoint: "http://" + addr, BlockSize: 16}
		if err := srv.Register(w, server.SourceAPI, false); err != nil {
			t.Fatal(err)
		}
	}
	pc := epp.Config{Router: e.marks, Fleet: epp.FleetFunc(srv.Fleet)}
	if pickerCfg != nil {
		pickerCfg(&pc)
	}
	p, err := epp.New(pc)
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
	gc := gateway.Config{PickerAddr: lis.Addr().String()}
	if gwCfg != nil {
		gwCfg(&gc)
	}
	if e.gw, err = gateway.New(gc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.gw.Close() })
	e.url = "http://" + serve(t, e.gw)
	return e
}

func serve(t testing.TB, h http.Handler) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return lis.Addr().String()
}

func completions(model string, n, maxTokens int, stream bool) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint(i + 1)
	}
	return fmt.Sprintf(`{"model":%q,"prompt":[%s],"max_tokens":%d,"stream":%v}`, model, strings.Join(ids, ","), maxTokens, stream)
}

func (e *env) post(path, body string) (*http.Response, string) {
	e.t.Helper()
	resp, err := http.Post(e.url+path, "application/json", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, string(b)
}

// checkLifecycle asserts that the picker marked every request prefill done
// then finished, and that the router holds no request.
func (e *env) checkLifecycle(requests int) {
	e.t.Helper()
	m := e.marks.all()
	if len(m) != requests {
		e.t.Fatalf("marks for %d requests, want %d: %v", len(m), requests, m)
	}
	for id, seq := range m {
		if strings.Join(seq, ",") != "prefill,finished" {
			e.t.Fatalf("request %s marked %v, want prefill then finished", id, seq)
		}
	}
	if n := e.rt.ActiveRequests(); n != 0 {
		e.t.Fatalf("router holds %d active requests after every response ended", n)
	}
}

// TestStreamingThroughPicker: a streamed completion goes through the
// picker to a front, the SSE stream reaches the client whole, and the
// picker (not the gateway) marks its prefill done and its end.
func TestStreamingThroughPicker(t *testing.T) {
	e := newEnv(t, nil, nil)
	resp, body := e.post("/v1/completions", completions("m", 64, 3, true))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var text strings.Builder
	sc := bufio.NewScanner(strings.NewReader(body))
	var events []string
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	if len(events) < 2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q: want chunks then [DONE]", events)
	}
	for _, ev := range events[:len(events)-1] {
		var c struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		text.WriteString(c.Choices[0].Text)
	}
	if text.String() != " tok tok tok" {
		t.Fatalf("streamed text %q, want three tokens", text.String())
	}
	if len(e.served) != 1 {
		t.Fatalf("%d fronts received the request, want 1", len(e.served))
	}
	e.checkLifecycle(1)
	if st := e.gw.Stats(); st.Picked != 1 || st.Requests != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestNonStreamingThroughPicker: a whole JSON response is one body chunk
// for the picker, which marks prefill done and finished on it.
func TestNonStreamingThroughPicker(t *testing.T) {
	e := newEnv(t, nil, nil)
	resp, body := e.post("/v1/completions", completions("m", 40, 2, false))
	var c struct {
		Choices []struct{ Text string } `json:"choices"`
		Usage   struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v: %s", resp.StatusCode, err, body)
	}
	if c.Choices[0].Text != " tok tok" || c.Usage.PromptTokens != 40 {
		t.Fatalf("response %s: want two tokens and 40 prompt tokens", body)
	}
	e.checkLifecycle(1)
}

// TestImmediateResponsesPassThrough: the picker's refusals reach the
// client with their status and OpenAI error body, and no engine sees them.
func TestImmediateResponsesPassThrough(t *testing.T) {
	e := newEnv(t, func(c *epp.Config) { c.MaxBodyBytes = 1024 }, nil)
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"body over the picker's limit", completions("m", 400, 1, true), 413},
		{"model no worker serves", completions("other", 4, 1, true), 404},
		{"malformed JSON", `{"model":"m","prompt":[1,2`, 400},
	} {
		resp, body := e.post("/v1/completions", tc.body)
		var er struct {
			Error struct{ Message string } `json:"error"`
		}
		if resp.StatusCode != tc.status || json.Unmarshal([]byte(body), &er) != nil || er.Error.Message == "" {
			t.Fatalf("%s: status %d body %q, want %d with an OpenAI error", tc.name, resp.StatusCode, body, tc.status)
		}
	}
	if len(e.served) != 0 {
		t.Fatalf("an engine received a refused request")
	}
	if st := e.gw.Stats(); st.Immediate != 3 || st.Picked != 0 {
		t.Fatalf("stats %+v: want 3 immediate responses", st)
	}
	if n := e.rt.ActiveRequests(); n != 0 {
		t.Fatalf("router holds %d active requests", n)
	}
}

// TestConcurrentRequests: requests at once, streamed and not, all served
// whole, all marked by the picker.
func TestConcurrentRequests(t *testing.T) {
	e := newEnv(t, nil, nil)
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(e.url+"/v1/completions", "application/json",
				strings.NewReader(completions("m", 32+16*(i%4), 4, i%2 == 0)))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	e.checkLifecycle(n)
}

// TestFailOpen: with the picker's address refusing connections the
// gateway sends requests round robin to its upstreams, or answers 503.
func TestFailOpen(t *testing.T) {
	refused, err := testaddr.NewRefused()
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	e := newEnv(t, nil, nil) // its fronts; this test's gateways know no picker
	gw, err := gateway.New(gateway.Config{PickerAddr: refused.Addr(), FailOpen: true, Upstreams: e.fronts})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	url := "http://" + serve(t, gw)
	for i := 0; i < 2; i++ {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(completions("m", 20, 1, true)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
			t.Fatalf("fail-open request %d: status %d, %q", i, resp.StatusCode, b)
		}
	}
	if a, b := <-e.served, <-e.served; a == b {
		t.Fatalf("both requests went to front %d, want one each", a)
	}
	if st := gw.Stats(); st.FailedOpen != 2 || st.Picked != 0 {
		t.Fatalf("stats %+v: want 2 failed open", st)
	}

	closed, err := gateway.New(gateway.Config{PickerAddr: refused.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer closed.Close()
	resp, err := http.Post("http://"+serve(t, closed)+"/v1/completions", "application/json", strings.NewReader(completions("m", 20, 1, true)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || closed.Stats().FailedClosed != 1 {
		t.Fatalf("fail-closed: status %d, stats %+v", resp.StatusCode, closed.Stats())
	}
}

// TestChunkedBodyOverGatewayLimit: a body with no content-length that
// outgrows the gateway's buffer ends the picker's stream and is answered
// 413 (with no pick timeout to fall back on).
func TestChunkedBodyOverGatewayLimit(t *testing.T) {
	e := newEnv(t, nil, func(c *gateway.Config) { c.MaxBodyBytes = 1024; c.PickTimeout = time.Hour })
	body := io.MultiReader(strings.NewReader(completions("m", 1000, 1, true))) // not sized: sent chunked
	resp, err := http.Post(e.url+"/v1/completions", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 || len(e.served) != 0 {
		t.Fatalf("status %d, %d requests served: want 413 and none", resp.StatusCode, len(e.served))
	}
}
