package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/gateway"
)

// PolicyKVEPPHTTP routes real HTTP requests through bench's gateway, which
// asks the router's endpoint picker (--epp-addr) over ext_proc and forwards
// to the engines' OpenAI fronts. Nothing but the picker tells the router
// that a request's prefill is done or that it finished.
const PolicyKVEPPHTTP = "kvrouter-epp-http"

// HTTPSide is the HTTP path of PolicyKVEPPHTTP: an OpenAI front per engine
// (rank 0 of a dp_size 1 worker, on its own port), bench's gateway in
// front of the picker, and a client sending each request to the gateway.
//
// The player keeps the engines' simulated timing: a front's backend holds
// a request until the player's job for it reaches prefill done and finish,
// which it learns through the player's marks (HTTPSide is the player's
// RouterClient for those two calls only; they make no call to the router).
type HTTPSide struct {
	kvrouterv1.RouterClient // nil: only the marks below are called

	fronts  []*http.Server
	addrs   []string // front i's host:port
	gw      *gateway.Gateway
	gwSrv   *http.Server
	gwURL   string
	client  *http.Client
	mu      sync.Mutex
	pending map[string]*httpJob
}

// httpJob is one request between the client and the player.
type httpJob struct {
	tokens   []uint32
	arrived  chan int // the engine whose front received it
	first    chan struct{}
	finished chan struct{}
	done     chan struct{} // the client read the whole response
	err      error         // the client's, set before done closes
	once     [2]sync.Once
}

// StartHTTPSide starts one front per engine of the fleet and a gateway in
// front of the picker at pickerAddr, failing open to the fronts in turn.
func StartHTTPSide(fleet *harness.Fleet, pickerAddr string) (_ *HTTPSide, err error) {
	s := &HTTPSide{pending: map[string]*httpJob{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for i := range fleet.Engines {
		front, err := engine.NewOpenAIServer(engine.OpenAIConfig{Ranks: []engine.Backend{playerBackend{s: s, engine: i}}})
		if err != nil {
			return nil, err
		}
		addr, srv, err := serveHTTP(front.Handler(0))
		if err != nil {
			return nil, err
		}
		s.fronts, s.addrs = append(s.fronts, srv), append(s.addrs, addr)
	}
	if s.gw, err = gateway.New(gateway.Config{PickerAddr: pickerAddr, FailOpen: true, Upstreams: s.addrs}); err != nil {
		return nil, err
	}
	addr, srv, err := serveHTTP(s.gw)
	if err != nil {
		return nil, err
	}
	s.gwSrv, s.gwURL = srv, "http://"+addr
	s.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
	return s, nil
}

func serveHTTP(h http.Handler) (string, *http.Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	go srv.Serve(lis)
	return lis.Addr().String(), srv, nil
}

// Endpoints are the fronts' addresses, engine i's at i: the endpoints to
// register the workers under.
func (s *HTTPSide) Endpoints() []string { return s.addrs }

// GatewayStats are the gateway's totals.
func (s *HTTPSide) GatewayStats() gateway.Stats { return s.gw.Stats() }

// Close stops the gateway and the fronts.
func (s *HTTPSide) Close() {
	if s.gwSrv != nil {
		s.gwSrv.Close()
	}
	if s.gw != nil {
		s.gw.Close()
	}
	for _, f := range s.fronts {
		f.Close()
	}
}

// Chooser sends each request to the gateway and answers with the engine
// whose front received it; an answer without one (an immediate response,
// a failure) is the choice's error.
func (s *HTTPSide) Chooser(model string) ChooseFunc {
	return func(ctx context.Context, _ int, tokens []uint32, id string) (Choice, error) {
		t0 := time.Now()
		j := &httpJob{tokens: tokens, arrived: make(chan int, 1), first: make(chan struct{}),
			finished: make(chan struct{}), done: make(chan struct{})}
		s.mu.Lock()
		s.pending[id] = j
		s.mu.Unlock()
		go s.send(ctx, id, model, j)
		select {
		case i := <-j.arrived:
			return Choice{Engine: i, Routed: true, RouteLatency: time.Since(t0)}, nil
		case <-j.done:
			s.forget(id)
			if j.err == nil {
				j.err = errors.New("the gateway answered before any engine received the request")
			}
			return Choice{}, j.err
		case <-ctx.Done():
			return Choice{}, ctx.Err()
		}
	}
}

func (s *HTTPSide) forget(id string) {
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
}

// send posts the request to the gateway and reads the response to its end.
func (s *HTTPSide) send(ctx context.Context, id, model string, j *httpJob) {
	defer close(j.done)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.gwURL+"/v1/completions", bytes.NewReader(completionsBody(model, j.tokens)))
	if err != nil {
		j.err = err
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := s.client.Do(req)
	if err != nil {
		j.err = err
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		j.err = fmt.Errorf("reading the response: %w", err)
	case resp.StatusCode != http.StatusOK:
		j.err = fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	case !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")):
		j.err = fmt.Errorf("a streamed response without its end: %q", body)
	}
}

// playerBackend is engine i's front's backend: it waits for the player's
// marks of the request.
type playerBackend struct {
	s      *HTTPSide
	engine int
}

// Serve implements engine.Backend.
func (b playerBackend) Serve(ctx context.Context, j *engine.Job, first func()) error {
	b.s.mu.Lock()
	p := b.s.pending[j.ID]
	b.s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("engine %d: no request %q is in flight", b.engine, j.ID)
	}
	if !slices.Equal(p.tokens, j.Tokens) {
		return fmt.Errorf("engine %d: request %s reached the engine with other tokens than it was sent with", b.engine, j.ID)
	}
	select {
	case p.arrived <- b.engine:
	default:
		return fmt.Errorf("engine %d: request %s received twice", b.engine, j.ID)
	}
	select {
	case <-p.first:
		first()
	case <-p.finished:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-p.finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MarkPrefillDone lets the request's front write its first token.
func (s *HTTPSide) MarkPrefillDone(_ context.Context, ref *kvrouterv1.RequestRef, _ ...grpc.CallOption) (*kvrouterv1.Ack, error) {
	s.mu.Lock()
	j := s.pending[ref.GetRequestId()]
	s.mu.Unlock()
	if j == nil {
		return nil, fmt.Errorf("no request %s in flight", ref.GetRequestId())
	}
	j.once[0].Do(func() { close(j.first) })
	return &kvrouterv1.Ack{}, nil
}

// MarkFinished lets the request's front finish its response, and returns
// when the client has read it (with the client's error, if any).
func (s *HTTPSide) MarkFinished(ctx context.Context, ref *kvrouterv1.RequestRef, _ ...grpc.CallOption) (*kvrouterv1.Ack, error) {
	s.mu.Lock()
	j := s.pending[ref.GetRequestId()]
	s.mu.Unlock()
	if j == nil {
		return nil, fmt.Errorf("no request %s in flight", ref.GetRequestId())
	}
	j.once[1].Do(func() { close(j.finished) })
	select {
	case <-j.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.forget(ref.GetRequestId())
	if j.err != nil {
		return nil, j.err
	}
	return &kvrouterv1.Ack{}, nil
}
