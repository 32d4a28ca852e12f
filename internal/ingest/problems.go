package ingest

import (
	"sync"

	"github.com/kvrouter/kvrouter/internal/normalize"
)

// A rank whose stores are refused (an engine block size the router cannot
// use, a parent the index does not hold, a batch that does not decode) says
// so where an operator looks: RankStatus.Problems, with counts and the last
// detail, and a WARN line the first time a reason shows on the rank (later
// ones rate-limited), besides the counters.

// Problem is one reason a rank's events are refused or skipped.
type Problem struct {
	// Reason is the counter's reason label ("block_size_mismatch",
	// "parent_not_found", "decode_error", ...).
	Reason string
	// Count is how many events or batches were refused for it.
	Count uint64
	// Detail is the last refusal's message.
	Detail string
}

// problemFiltered are the normalizer's skip reasons that refuse what the
// engine meant to store; the others skip what the router does not index
// (no blocks, other attention groups, remote blocks).
// ("": not a problem).
var problemFiltered = filteredProblems()

func filteredProblems() (out [normalize.NumReasons]string) {
	for r := range out {
		switch name := normalize.Reason(r).String(); name {
		case "block_size_mismatch", "invalid_block_sequence", "ambiguous_cache_namespace", "unknown_kind",
			"unlearned_group", "unknown_tag", "malformed_event":
			out[r] = name
		}
	}
	return out
}

// problemDetails says what each reason means, for Detail when the refusal
// carries no message of its own.
var problemDetails = map[string]string{
	"block_size_mismatch":       "the engine's block size is not a multiple of the router's --block-size",
	"invalid_block_sequence":    "a store repeats a block hash or names its own parent",
	"ambiguous_cache_namespace": "the parent's cache namespace is ambiguous",
	"unknown_kind":              "kv_cache_spec_kind is not one the router knows",
	"unlearned_group":           "a non-zero group index whose kind was never learned",
	"unknown_tag":               "an event tag that is not BlockStored, BlockRemoved or AllBlocksCleared",
	"malformed_event":           "wrong field types or token count",
	"parent_not_found":          "a store's parent is not in the index for this rank (lost history, or an engine hash scheme the router does not follow)",
	"invalid":                   "the index refused a store (a repeated engine hash, a bad tier)",
}

// problems is a rank's refusals by reason: written by the applier, read by
// Status.
type problems struct {
	mu   sync.Mutex
	list []Problem
}

// add counts n refusals for reason and reports whether the reason is new
// on the rank.
func (p *problems) add(reason string, n uint64, detail string) bool {
	if detail == "" {
		detail = problemDetails[reason]
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.list {
		if q := &p.list[i]; q.Reason == reason {
			q.Count += n
			q.Detail = detail
			return false
		}
	}
	p.list = append(p.list, Problem{Reason: reason, Count: n, Detail: detail})
	return true
}

// snapshot returns a copy of the list (nil when empty).
func (p *problems) snapshot() []Problem {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.list) == 0 {
		return nil
	}
	return append([]Problem(nil), p.list...)
}

// noteProblems records the refusals of the batch st describes.
func (r *rank) noteProblems(seq uint64, st *batchStats) {
	for reason, name := range problemFiltered {
		if n := st.filtered[reason]; n > 0 && name != "" {
			r.problem(seq, name, uint64(n), "")
		}
	}
	for _, i := range []int{applyParentNotFound, applyInvalid} {
		if n := st.applyErrors[i]; n > 0 {
			r.problem(seq, applyErrorNames[i], uint64(n), "")
		}
	}
}

// problem counts n refusals for reason on the rank and logs them: at WARN
// the first time the reason shows, then rate-limited.
func (r *rank) problem(seq uint64, reason string, n uint64, detail string) {
	first := r.probs.add(reason, n, detail)
	if first || r.logLimit.allow() {
		if detail == "" {
			detail = problemDetails[reason]
		}
		r.log.Warn("kv events: refusing events", "reason", reason, "count", n, "seq", seq, "detail", detail)
	}
}
