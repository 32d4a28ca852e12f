package epp

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// allCandidates asks the router for every candidate, when a subset hint
// may need the best one inside it.
const allCandidates = 1 << 16

// choose picks the request's endpoint: the conformance header's, or the
// router's for the body's prompt (within the subset hint), or for a
// header-only request any endpoint in the subset. A routed request's load
// is then held under s.requestID.
func (s *reqStream) choose() (string, error) {
	if !s.p.cfg.Router.Ready() {
		return "", fmt.Errorf("%w: the router is restoring its index", ErrNoEndpoint)
	}
	if s.testPick != "" {
		s.p.m.skip(skipConformance)
		return s.testPick, nil
	}
	if !s.hasBody {
		return s.anyEndpoint()
	}
	prompt, err := promptOf(s.path, s.body)
	if err != nil {
		return "", err
	}
	req := &kvrouterv1.RouteRequest{Prompt: prompt, RequestId: s.p.requestID(), MaxCandidates: 1}
	if s.subset != nil {
		req.MaxCandidates = allCandidates
	}
	resp, err := s.p.cfg.Router.Route(s.ctx, req)
	if err != nil {
		return "", routeError(err)
	}
	s.requestID = req.RequestId
	ep := s.endpointOf(resp.GetWorkerId(), resp.GetDpRank(), resp.GetEndpoint())
	if ep != "" && s.subset.allows(ep) {
		return ep, nil
	}
	// The router's choice is outside the subset (or has no endpoint): the
	// cheapest candidate inside it serves, and the router's load is
	// released, as the router cannot move it to another rank.
	s.finish()
	s.respDone = false
	s.p.m.skip(skipSubsetMoved)
	best, bestCost := "", 0.0
	for _, c := range resp.GetCandidates() { // every candidate, in no order
		if best != "" && c.GetCost() >= bestCost {
			continue
		}
		if ep := s.endpointOf(c.GetWorkerId(), c.GetDpRank(), ""); ep != "" && s.subset.allows(ep) {
			best, bestCost = ep, c.GetCost()
		}
	}
	if best != "" {
		return best, nil
	}
	return "", fmt.Errorf("%w: no worker of model %q is in the subset hint", ErrNoEndpoint, prompt.GetModel())
}

// endpointOf is the serving endpoint of a worker's rank; rank0 is the
// worker's endpoint when the caller has it.
func (s *reqStream) endpointOf(worker string, rank uint32, rank0 string) string {
	if rank == 0 && rank0 != "" {
		if w := s.p.cfg.Fleet.Worker(worker); w == nil || len(w.GetRankEndpoints()) == 0 {
			return hostPort(rank0)
		}
	}
	w := s.p.cfg.Fleet.Worker(worker)
	if w == nil {
		return ""
	}
	return rankEndpoint(w, rank)
}

// anyEndpoint picks for a request with no body (no prompt to route): the
// fleet's endpoints in turn, within the subset.
func (s *reqStream) anyEndpoint() (string, error) {
	var eps []string
	for _, w := range s.p.cfg.Fleet.Workers() {
		for r := range max(w.GetDpSize(), 1) {
			if ep := rankEndpoint(w, r); ep != "" && s.subset.allows(ep) {
				eps = append(eps, ep)
			}
		}
	}
	if len(eps) == 0 {
		return "", fmt.Errorf("%w: no registered endpoint%s", ErrNoEndpoint, map[bool]string{true: " in the subset hint"}[s.subset != nil])
	}
	return eps[s.p.nextAny.Add(1)%uint64(len(eps))], nil
}

// routeError is the picker's error for a router status.
func routeError(err error) error {
	st, _ := status.FromError(err)
	msg := strings.TrimSpace(st.Message())
	switch st.Code() {
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %s", ErrBadRequest, msg)
	case codes.NotFound:
		return fmt.Errorf("%w: %s", ErrUnknownModel, msg)
	case codes.Unavailable, codes.ResourceExhausted:
		return fmt.Errorf("%w: %s", ErrBusy, msg)
	}
	return fmt.Errorf("%w: %s", ErrInternal, msg)
}
