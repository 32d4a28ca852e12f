package scoring

import (
	"fmt"
	"math"
	"time"
)

// Route chooses a worker for p. With requestID set, the request counts as
// active load on the chosen worker until MarkFinished (or RequestTTL). temperature
// 0 picks the minimum cost; above 0 samples a softmax over normalized costs.
// maxCandidates > 0 keeps only that many cheapest candidates in the Decision
// (the chosen one always among them).
func (r *Router) Route(p *Prompt, requestID string, temperature float64, maxCandidates int) (*Decision, error) {
	dec := new(Decision)
	if err := r.RouteTo(dec, p, requestID, temperature, maxCandidates); err != nil {
		return nil, err
	}
	return dec, nil
}

// RouteTo is Route writing the decision into dec, whose Candidates' memory it
// reuses: a caller that routes many prompts (a stream) keeps one Decision.
// On error dec is left in an unspecified state.
func (r *Router) RouteTo(dec *Decision, p *Prompt, requestID string, temperature float64, maxCandidates int) error {
	if err := checkTemperature(temperature); err != nil {
		return err
	}
	now, err := r.admit(requestID)
	if err != nil {
		return err
	}
	s := r.pool.Get().(*scratch)
	defer r.pool.Put(s)
	if err := r.preparePrompt(p, s); err != nil {
		return err
	}
	if r.cfg.Forward != nil {
		if done, err := r.forward(dec, p, s, requestID, temperature, maxCandidates); done {
			return err
		}
	}
	return r.decide(dec, p, s, requestID, temperature, maxCandidates, now)
}

func checkTemperature(t float64) error {
	if t < 0 || math.IsNaN(t) || math.IsInf(t, 0) {
		return fmt.Errorf("%w: temperature %v must be a finite number >= 0", ErrInvalidArgument, t)
	}
	return nil
}

// admit checks a Route's request id and, for one with an id, that the
// request table has room, before any work; it returns the Route's time.
func (r *Router) admit(requestID string) (time.Time, error) {
	if err := r.checkRequestID(requestID); err != nil {
		return time.Time{}, err
	}
	now := r.cfg.now()
	r.load.expire(now)
	if requestID != "" {
		// Refused before any work; add checks again, under its lock.
		if err := r.load.checkRoom(); err != nil {
			return now, err
		}
	}
	return now, nil
}

// decide routes the prompt hashed in s under r.mu's read lock, then
// learns the slots its match missed.
func (r *Router) decide(dec *Decision, p *Prompt, s *scratch, requestID string, temperature float64, maxCandidates int, now time.Time) error {
	r.mu.RLock()
	err := r.routeLocked(dec, p, s, requestID, temperature, maxCandidates, now)
	r.mu.RUnlock()
	if err != nil {
		return err
	}
	r.learnSlots(s.missed)
	return nil
}

// checkRequestID bounds a request_id's length (MaxRequestIDBytes).
func (r *Router) checkRequestID(id string) error {
	if len(id) > r.cfg.MaxRequestIDBytes {
		return limitError(LimitRequestIDBytes, ErrInvalidArgument, "request_id has %d bytes, over --max-request-id-bytes %d", len(id), r.cfg.MaxRequestIDBytes)
	}
	return nil
}

// routeLocked is Route's work under r.mu's read lock: match the prompt,
// cost the candidates, choose one, then record the choice as load and
// predictions. Recording happens under the read lock too, which keeps chosen
// registered: a RemoveWorker in between would leave a request on a dead rank
// and a prediction in an overlay slot that may have a new owner.
func (r *Router) routeLocked(dec *Decision, p *Prompt, s *scratch, requestID string, temperature float64, maxCandidates int, now time.Time) error {
	ranks, err := r.evaluate(p, s, false, now)
	if err != nil {
		return err
	}
	if !r.costCandidates(ranks, s, now) {
		return limitError(LimitBusy, ErrResourceExhausted, "every worker of model %q is over its busy thresholds (--max-active-prefill-tokens, --max-active-decode-blocks); retry after a backoff", p.Model)
	}
	pick := r.chooseAdmitted(s, temperature)
	if place, replicas := r.replicaPlace(); replicas > 1 && temperature == 0 {
		pick = s.preferOwn(ranks, pick, place, replicas)
	}
	fillDecision(dec, ranks, s, pick, maxCandidates)
	s.diversion(dec, pick)
	s.explain(dec, pick, temperature)
	chosen := ranks[s.cands[pick]]
	pb, pt, db := r.loadOf(p, s, dec.Matched)
	if requestID != "" {
		if err := r.load.add(requestID, chosen, pb, pt, db, now.Add(r.cfg.RequestTTL)); err != nil {
			return err
		}
	}
	predicted := r.predictChosen(s, chosen, dec.Matched, now)
	r.reportRoute(requestID, chosen, pb, pt, db, predicted) // replicas (replica.go)
	return nil
}

// loadOf is the load a routed request puts on its rank: the prompt's blocks
// and tokens past the matched prefix as prefill until MarkPrefillDone, then
// all its blocks as decode until MarkFinished or RequestTTL.
func (r *Router) loadOf(p *Prompt, s *scratch, matched uint32) (prefillBlocks, prefillTokens, decodeBlocks int64) {
	uncached := uint32(len(s.hashes)) - matched
	tokens := max(len(p.Tokens), p.tokens)
	uncachedTokens := int64(tokens) - int64(matched)*int64(r.cfg.BlockSize)
	if tokens == 0 {
		uncachedTokens = int64(uncached) * int64(r.cfg.BlockSize)
	}
	return int64(uncached), uncachedTokens, int64(len(s.hashes))
}

// predictChosen records the prompt's blocks in the overlay as held by chosen.
// Predictions cover at most PredictionMaxBlocks blocks past what the rank's
// index holds: enough for a burst sharing a new prefix to land together,
// without a long prompt's tail costing hundreds of overlay updates on every
// Route.
// It returns the keys predicted.
func (r *Router) predictChosen(s *scratch, chosen *rank, matched uint32, now time.Time) []uint64 {
	uncached := uint32(len(s.hashes)) - matched
	var keys []uint64
	switch {
	case chosen.approximate && len(s.hashes) > 0:
		// LRU: the prompt's blocks the rank already holds are refreshed too.
		chain := s.prefixKeys()
		keys = chain[:min(len(chain), r.cfg.PredictionMaxBlocks)]
	case uncached > 0 && !r.cfg.DisablePrediction && !chosen.approximate:
		chain := s.prefixKeys()
		keys = chain[matched:min(len(chain), int(matched)+r.cfg.PredictionMaxBlocks)]
	}
	if len(keys) > 0 {
		chosen.model.overlay.predict(chosen, keys, now)
	}
	return keys
}
