package server

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// maxKeptTokens bounds the token_ids (and block_hashes) memory a pooled or a
// stream's request keeps between requests (256 KiB; 512 KiB of hashes); a
// longer prompt's is dropped after use.
const maxKeptTokens = 1 << 16

// keepRequest drops what req should not keep for the next request.
func keepRequest(req *kvrouterv1.RouteRequest) {
	if p := req.Prompt; p != nil {
		if cap(p.TokenIds) > maxKeptTokens {
			p.TokenIds = nil
		}
		if cap(p.BlockHashes) > maxKeptTokens {
			p.BlockHashes = nil
		}
	}
}

// routerServiceDesc is the generated Router service with its Route handler
// replaced by routeHandler.
func routerServiceDesc() *grpc.ServiceDesc {
	d := kvrouterv1.Router_ServiceDesc
	d.Methods = append([]grpc.MethodDesc(nil), d.Methods...)
	for i := range d.Methods {
		if d.Methods[i].MethodName == "Route" {
			d.Methods[i].Handler = routeHandler
		}
	}
	return &d
}

var routeInfo = grpc.UnaryServerInfo{FullMethod: kvrouterv1.Router_Route_FullMethodName}

// routeHandler is the generated Route handler but for the request, which
// comes from the pool and goes back once the call returns. Nothing keeps
// the request past the call: the response does not alias it, and the
// interceptors (metrics, auth) do not hold it.
func routeHandler(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Server)
	in, _ := s.requests.Get().(*kvrouterv1.RouteRequest)
	if in == nil {
		in = new(kvrouterv1.RouteRequest)
	}
	defer func() {
		keepRequest(in)
		s.requests.Put(in)
	}()
	if err := dec(in); err != nil {
		return nil, err
	}
	if icpt == nil {
		return s.Route(ctx, in)
	}
	info := routeInfo
	info.Server = srv
	return icpt(ctx, in, &info, s.routeUnary)
}

func (s *Server) routeUnary(ctx context.Context, req any) (any, error) {
	return s.Route(ctx, req.(*kvrouterv1.RouteRequest))
}

// Route chooses the worker for the prompt.
func (s *Server) Route(_ context.Context, req *kvrouterv1.RouteRequest) (*kvrouterv1.RouteResponse, error) {
	var d scoring.Decision
	return s.route(req, &d)
}

// DefaultMaxCandidates is how many candidates a RouteResponse lists when the
// request's max_candidates is 0: the chosen one and the seven next cheapest,
// enough for a gateway's fallbacks and to see why a worker won. Every
// candidate of a large fleet (a thousand on 1000 ranks) costs more to build, marshal and
// send than the routing, so a client asks for them explicitly, with
// max_candidates at or above the fleet's rank count. The limit applies in
// the router, before the response is built.
const DefaultMaxCandidates = 8

// maxCandidates is the limit a request asks for, with 0 as the default.
func maxCandidates(req *kvrouterv1.RouteRequest) int {
	if n := req.GetMaxCandidates(); n > 0 {
		return int(n)
	}
	return DefaultMaxCandidates
}

// route answers req, with d as the decision's memory (reused by a stream).
func (s *Server) route(req *kvrouterv1.RouteRequest, d *scoring.Decision) (*kvrouterv1.RouteResponse, error) {
	var p scoring.Prompt
	text, err := s.promptText(&p, req.GetPrompt())
	if err != nil {
		return nil, err
	}
	if err := s.router.RouteTo(d, &p, req.GetRequestId(), req.GetTemperature(), maxCandidates(req)); err != nil {
		return nil, s.fail(err)
	}
	s.metrics.decision(d)
	s.noteRouted(text, &p, req.GetRequestId(), d)
	out := &kvrouterv1.RouteResponse{
		WorkerId:      d.WorkerID,
		DpRank:        d.DPRank,
		Endpoint:      d.Endpoint,
		MatchedBlocks: d.Matched,
		PromptBlocks:  d.PromptBlocks,
		Cost:          d.Cost,
		Candidates:    make([]*kvrouterv1.Candidate, len(d.Candidates)),
	}
	cands := make([]kvrouterv1.Candidate, len(d.Candidates)) // one allocation for all
	for i, c := range d.Candidates {
		cands[i] = kvrouterv1.Candidate{
			WorkerId: c.WorkerID, DpRank: c.DPRank, MatchedBlocks: c.Matched,
			PrefillBlocks: c.PrefillBlocks, DecodeBlocks: c.DecodeBlocks, Cost: c.Cost,
		}
		out.Candidates[i] = &cands[i]
	}
	if s.onDecision != nil {
		s.onDecision(p.Model, req.GetRequestId(), d)
	}
	return out, nil
}

// RouteStream answers each RouteRequest of the stream as Route would, in
// order, until the client closes its side. A failed item is answered with its
// status (code and message) and the stream goes on. Each item is recorded in
// the RPC metrics under the RouteStream method, as a unary call would be.
//
// One stream is served by one goroutine, items one after another: a gateway
// that wants more than one core's worth of Routes opens more streams. The
// request and its token_ids memory are reused from item to item.
func (s *Server) RouteStream(stream kvrouterv1.Router_RouteStreamServer) error {
	if !s.ready.Load() {
		return status.Error(codes.Unavailable, notReadyMessage)
	}
	var (
		req kvrouterv1.RouteRequest
		d   scoring.Decision
	)
	for {
		keepRequest(&req)
		if err := stream.RecvMsg(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		start := time.Now()
		resp, err := s.route(&req, &d)
		st, _ := status.FromError(err)
		s.metrics.observe(kvrouterv1.Router_RouteStream_FullMethodName, time.Since(start), st.Code())
		out := &kvrouterv1.RouteStreamResponse{Response: resp}
		if err != nil {
			out.Code, out.Message = uint32(st.Code()), st.Message()
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}
