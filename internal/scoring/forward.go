package scoring

import "fmt"

// Replicas that each decide part of a burst decide it on the same state:
// a Route's load reaches the others only after the sync lag, so requests a
// gateway spreads over replicas within it are placed as if none of the
// others had been (spread.go breaks the worst of those ties apart, but
// cannot see them). With Config.Forward set, a replica instead passes each
// Route, already checked and hashed, to the one replica deciding for the
// cluster, which decides it with every earlier Route's load in place, as
// one router would, records it and shares it with its changes. A replica
// whose decider does not answer decides itself.

// ForwardedRoute is a Route as a replica passes it to the decider: the
// prompt's router block hashes (hashed where it arrived) and its length in
// tokens, which the request's load counts.
type ForwardedRoute struct {
	Model string
	// Hashes are the prompt's router block hashes. In a Route offered to
	// Config.Forward they are valid only during the call.
	Hashes []uint64
	// Tokens is the prompt's length in tokens; 0 for a prompt sent as
	// block hashes.
	Tokens        int
	RequestID     string
	Temperature   float64
	MaxCandidates int
}

// forward offers the Route, hashed in s, to Config.Forward.
func (r *Router) forward(dec *Decision, p *Prompt, s *scratch, requestID string, temperature float64, maxCandidates int) (bool, error) {
	s.fwd = ForwardedRoute{Model: p.Model, Hashes: s.hashes, Tokens: len(p.Tokens), RequestID: requestID,
		Temperature: temperature, MaxCandidates: maxCandidates}
	done, err := r.cfg.Forward(&s.fwd, dec)
	s.fwd.Hashes = nil // the pooled scratch keeps no caller's slice
	return done, err
}

// RouteForwarded decides a Route another replica forwarded, into dec, as
// RouteTo decides a local one (it is never forwarded again). fr is checked
// as a prompt is, against this router's limits: it comes from the network.
func (r *Router) RouteForwarded(dec *Decision, fr *ForwardedRoute) error {
	if err := r.checkForwarded(fr); err != nil {
		return err
	}
	now, err := r.admit(fr.RequestID)
	if err != nil {
		return err
	}
	s := r.pool.Get().(*scratch)
	defer r.pool.Put(s)
	s.hashes = append(s.hashes[:0], fr.Hashes...)
	return r.decide(dec, &Prompt{Model: fr.Model, tokens: fr.Tokens}, s, fr.RequestID, fr.Temperature, fr.MaxCandidates, now)
}

// checkForwarded checks a forwarded Route's shape and sizes: what
// checkPrompt and the temperature check ask of a local one, and that its
// hashes are as many as its tokens' full blocks.
func (r *Router) checkForwarded(fr *ForwardedRoute) error {
	if err := checkTemperature(fr.Temperature); err != nil {
		return err
	}
	bs := r.cfg.BlockSize
	switch {
	case fr.Model == "":
		return fmt.Errorf("%w: forwarded route: model is empty", ErrInvalidArgument)
	case fr.Tokens < 0 || fr.Tokens > r.cfg.MaxPromptTokens:
		return limitError(LimitPromptTokens, ErrInvalidArgument, "forwarded route has %d tokens, over --max-prompt-tokens %d", fr.Tokens, r.cfg.MaxPromptTokens)
	case fr.Tokens == 0 && len(fr.Hashes) == 0:
		return fmt.Errorf("%w: forwarded route: the prompt is empty", ErrInvalidArgument)
	case fr.Tokens == 0 && len(fr.Hashes) > r.cfg.MaxPromptTokens/bs:
		return limitError(LimitPromptTokens, ErrInvalidArgument, "forwarded route has %d blocks, over the limit of %d (--max-prompt-tokens / --block-size)", len(fr.Hashes), r.cfg.MaxPromptTokens/bs)
	case fr.Tokens > 0 && len(fr.Hashes) != fr.Tokens/bs:
		return fmt.Errorf("%w: forwarded route: %d block hashes for %d tokens of block size %d (want %d): the replicas' --block-size differ", ErrInvalidArgument, len(fr.Hashes), fr.Tokens, bs, fr.Tokens/bs)
	}
	return nil
}
