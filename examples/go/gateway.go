package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// ErrBusy is returned when kvrouter answers that every engine is busy: the
// caller queues the request or sheds it (an HTTP 429), and keeps the router.
var ErrBusy = errors.New("every engine is busy")

// Gateway sends requests through kvrouter: Route, dispatch with the rank
// header, MarkPrefillDone at the first token, MarkFinished at the end.
type Gateway struct {
	// Routers are kvrouter replicas, tried in order when one is not serving.
	Routers []kvrouterv1.RouterClient
	// HTTP sends requests to engines.
	HTTP *http.Client
	// RouteTimeout bounds one Route call; past it the gateway falls back.
	RouteTimeout time.Duration
	// Fallback picks an engine endpoint without kvrouter (round-robin,
	// least-loaded): routing without it loses cache hits, not requests.
	Fallback func() string
}

// Result is where a request went and what came back.
type Result struct {
	Endpoint string
	DPRank   uint32
	// Routed is false when the request went to the fallback endpoint.
	Routed bool
	// Chunks is the number of streamed events received before [DONE].
	Chunks int
}

// Serve sends one completion request. prompt carries the token ids the
// engine will prefill (its tokenizer, after its chat template).
func (g *Gateway) Serve(ctx context.Context, requestID string, prompt *kvrouterv1.Prompt, body []byte) (Result, error) {
	rr, router, err := g.route(ctx, requestID, prompt)
	switch {
	case errors.Is(err, ErrBusy):
		return Result{}, err
	case err != nil:
		return g.dispatch(ctx, Result{Endpoint: g.Fallback()}, body, nil)
	}
	res := Result{Endpoint: rr.GetEndpoint(), DPRank: rr.GetDpRank(), Routed: true}
	marks := &marker{router: router, id: requestID}
	// MarkFinished runs on success, error and cancellation alike: a request
	// never finished holds its load on the engine until the router's TTL.
	defer marks.finish()
	return g.dispatch(ctx, res, body, marks)
}

// route asks each replica in turn. Unavailable (not serving yet, draining,
// unreachable) moves on to the next replica; ResourceExhausted is ErrBusy;
// anything else (InvalidArgument, NotFound, DeadlineExceeded) is returned
// for the caller to fall back.
func (g *Gateway) route(ctx context.Context, id string, p *kvrouterv1.Prompt) (*kvrouterv1.RouteResponse, kvrouterv1.RouterClient, error) {
	var last error
	for _, r := range g.Routers {
		rctx, cancel := context.WithTimeout(ctx, g.RouteTimeout)
		rr, err := r.Route(rctx, &kvrouterv1.RouteRequest{Prompt: p, RequestId: id, MaxCandidates: 1})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			return rr, r, nil
		case codes.ResourceExhausted:
			return nil, nil, fmt.Errorf("%w: %v", ErrBusy, err)
		case codes.Unavailable:
			last = err
			continue
		default:
			return nil, nil, err
		}
	}
	return nil, nil, fmt.Errorf("no router serving: %w", last)
}

// dispatch posts body to the engine, pinned to res.DPRank when routed, and
// reads the stream; marks (nil for a fallback) hears of the first token.
func (g *Gateway) dispatch(ctx context.Context, res Result, body []byte, marks *marker) (Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+res.Endpoint+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", "application/json")
	if res.Routed {
		req.Header.Set("X-Data-Parallel-Rank", strconv.FormatUint(uint64(res.DPRank), 10))
	}
	resp, err := g.HTTP.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return res, fmt.Errorf("engine %s: %s", res.Endpoint, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return res, nil
		}
		if res.Chunks == 0 && marks != nil {
			marks.prefillDone()
		}
		res.Chunks++
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	return res, fmt.Errorf("engine %s: stream ended without [DONE]", res.Endpoint)
}

// marker sends a request's marks off the response's path: MarkPrefillDone
// in the background, MarkFinished after it, each with its own deadline and
// outliving the request's context (a cancelled request still finishes).
type marker struct {
	router kvrouterv1.RouterClient
	id     string
	wg     sync.WaitGroup
}

const markTimeout = 2 * time.Second

func (m *marker) prefillDone() {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
		defer cancel()
		// NotFound (the request expired, or was routed on a replica that
		// failed) needs nothing from the gateway.
		_, _ = m.router.MarkPrefillDone(ctx, &kvrouterv1.RequestRef{RequestId: m.id})
	}()
}

func (m *marker) finish() {
	m.wg.Wait() // a finish that overtook its prefill mark would leave the mark NotFound
	ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
	defer cancel()
	_, _ = m.router.MarkFinished(ctx, &kvrouterv1.RequestRef{RequestId: m.id})
}
