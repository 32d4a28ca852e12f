package server

import "github.com/kvrouter/kvrouter/internal/scoring"

// DecisionHook sees each Route decision (unary and stream items) after it is
// made, on the route path: it must be quick and safe for concurrent use,
// and must not keep d or its Candidates past the call (their memory is
// reused by the next item of a stream). The status page's decision log is
// one.
type DecisionHook func(model, requestID string, d *scoring.Decision)

// SetDecisionHook sets the hook Route calls with each decision (nil: none).
// Set it before the server serves: it is read without a lock.
func (s *Server) SetDecisionHook(h DecisionHook) { s.onDecision = h }
