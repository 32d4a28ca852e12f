package tracegen

import (
	"fmt"
	"io"
	"time"
)

// Summary describes one shape's requests in a trace (Shape "all": every
// request).
type Summary struct {
	Shape    string
	Requests int
	// Sessions is the number of distinct conversations, loops or queries.
	Sessions int
	// Rate is requests per second over the trace's duration.
	Rate            float64
	MeanInputTokens float64
	MeanInputBlocks float64
	MaxInputTokens  int
	MeanOutput      float64
	// PromptTokensPerSec is the offered prompt load, before any cache hit.
	PromptTokensPerSec float64
	// SharedRatio is the fraction of hash id references that an unlimited
	// cache of the trace's blocks would hit as a prefix (as trace.IDHitRate).
	SharedRatio float64
}

// Summarize returns one Summary per shape present, then "all".
func Summarize(reqs []Request, duration time.Duration) []Summary {
	var out []Summary
	for _, s := range []string{ShapeChat, ShapeAgent, ShapeRAG, "all"} {
		var sub []Request
		for _, r := range reqs {
			if s == "all" || r.Shape == s {
				sub = append(sub, r)
			}
		}
		if len(sub) == 0 && s != "all" {
			continue
		}
		out = append(out, summarize(s, sub, duration))
	}
	return out
}

func summarize(name string, reqs []Request, duration time.Duration) Summary {
	s := Summary{Shape: name, Requests: len(reqs)}
	if len(reqs) == 0 {
		return s
	}
	type key struct {
		shape   string
		session int
	}
	sessions := map[key]bool{}
	seen := map[uint64]bool{}
	var in, blocks, out, refs, hits int
	for _, r := range reqs {
		sessions[key{r.Shape, r.Session}] = true
		in += r.InputLength
		blocks += len(r.HashIDs)
		out += r.OutputLength
		s.MaxInputTokens = max(s.MaxInputTokens, r.InputLength)
		prefix := true
		for _, id := range r.HashIDs {
			refs++
			if prefix && seen[id] {
				hits++
			} else {
				prefix = false
			}
			seen[id] = true
		}
	}
	n := float64(len(reqs))
	s.Sessions = len(sessions)
	s.Rate = n / duration.Seconds()
	s.MeanInputTokens = float64(in) / n
	s.MeanInputBlocks = float64(blocks) / n
	s.MeanOutput = float64(out) / n
	s.PromptTokensPerSec = float64(in) / duration.Seconds()
	s.SharedRatio = float64(hits) / float64(refs)
	return s
}

// WriteSummaries prints summaries as a table.
func WriteSummaries(w io.Writer, ss []Summary) {
	fmt.Fprintf(w, "%6s %9s %9s %7s %11s %11s %10s %11s %14s %13s\n",
		"shape", "requests", "sessions", "req/s", "mean input", "mean blocks", "max input", "mean output", "prompt tok/s", "prefix-shared")
	for _, s := range ss {
		fmt.Fprintf(w, "%6s %9d %9d %7.2f %11.0f %11.1f %10d %11.0f %14.0f %12.1f%%\n",
			s.Shape, s.Requests, s.Sessions, s.Rate, s.MeanInputTokens, s.MeanInputBlocks, s.MaxInputTokens,
			s.MeanOutput, s.PromptTokensPerSec, 100*s.SharedRatio)
	}
}
