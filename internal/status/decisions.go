package status

import (
	"math"
	"sync"
	"time"
)

// Decision is one routing decision as the page lists it.
type Decision struct {
	Time      time.Time
	Model     string
	RequestID string
	WorkerID  string
	DPRank    uint32
	// Reason is why the worker was chosen: cache, load, guard, sampled or
	// single ("" when the router did not say).
	Reason       string
	Matched      uint32
	PromptBlocks uint32
	// RandomMatched is the expected matched blocks of a uniformly random
	// candidate: what round robin would have matched. Negative when not
	// known.
	RandomMatched float64
	Cost          float64
	// Candidates are the candidates' cost terms, the chosen one first, as
	// Recent reports them (Add takes them apart): the log keeps at most
	// LogConfig.Candidates and counts the rest in OmittedCandidates, with
	// any the caller already left out.
	Candidates        []Candidate
	OmittedCandidates int
}

// Candidate is one candidate's cost terms.
type Candidate struct {
	WorkerID      string
	DPRank        uint32
	Matched       uint32
	PrefillBlocks float64
	DecodeBlocks  float64
	Cost          float64
}

// LogConfig sizes a DecisionLog.
type LogConfig struct {
	// Decisions is how many recent decisions are kept (default 50).
	Decisions int
	// Candidates is how many candidates of each are kept (default 8).
	Candidates int
	// Interval is the width of a gain sample (default 10s), Samples how
	// many are kept (default 90).
	Interval time.Duration
	Samples  int
	// Now stamps decisions added without a time (default time.Now).
	Now func() time.Time
}

func (c *LogConfig) setDefaults() {
	if c.Decisions <= 0 {
		c.Decisions = 50
	}
	if c.Candidates <= 0 {
		c.Candidates = 8
	}
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.Samples <= 0 {
		c.Samples = 90
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// DecisionLog keeps the most recent decisions and, per time interval, the
// blocks they matched against what round robin would have: the routing
// gain over time. Its memory is fixed at construction: Add copies into it
// and allocates nothing. It is safe for concurrent use.
type DecisionLog struct {
	cfg LogConfig

	mu      sync.Mutex
	ring    []Decision // each with Candidates of capacity cfg.Candidates
	next    int        // the slot Add fills next
	stored  int        // filled slots
	buckets []bucket   // by interval index modulo len
}

// bucket sums the decisions of one interval.
type bucket struct {
	index     int64 // the interval: unix nanoseconds / Interval
	decisions uint64
	prompt    uint64
	matched   uint64
	// random sums RandomMatched over the decisions that knew it, and
	// knownPrompt their prompt blocks.
	random      float64
	knownPrompt uint64
}

// NewDecisionLog returns an empty log sized by cfg.
func NewDecisionLog(cfg LogConfig) *DecisionLog {
	cfg.setDefaults()
	l := &DecisionLog{cfg: cfg, ring: make([]Decision, cfg.Decisions), buckets: make([]bucket, cfg.Samples)}
	cands := make([]Candidate, cfg.Decisions*cfg.Candidates)
	for i := range l.ring {
		l.ring[i].Candidates = cands[i*cfg.Candidates : i*cfg.Candidates : (i+1)*cfg.Candidates]
	}
	for i := range l.buckets {
		l.buckets[i].index = math.MinInt64
	}
	return l
}

// Add records d, stamped now if its Time is zero, with the cost terms of
// its candidates, cands, the chosen one first; d.Candidates is not read.
// Add only reads cands, so a caller's can live on its stack: with the
// candidates in d, escape analysis would move them to the heap, since Add
// keeps d's strings.
func (l *DecisionLog) Add(d *Decision, cands []Candidate) {
	t := d.Time
	if t.IsZero() {
		t = l.cfg.Now()
	}
	n := min(len(cands), l.cfg.Candidates)
	l.mu.Lock()
	defer l.mu.Unlock()
	slot := &l.ring[l.next]
	kept := slot.Candidates[:0]
	for _, c := range cands[:n] {
		kept = append(kept, c)
	}
	*slot = Decision{
		Time: t, Model: d.Model, RequestID: d.RequestID, WorkerID: d.WorkerID, DPRank: d.DPRank,
		Reason: d.Reason, Matched: d.Matched, PromptBlocks: d.PromptBlocks, RandomMatched: d.RandomMatched,
		Cost: d.Cost, Candidates: kept, OmittedCandidates: d.OmittedCandidates + len(cands) - n,
	}
	l.next = (l.next + 1) % len(l.ring)
	l.stored = min(l.stored+1, len(l.ring))
	l.count(t, d)
}

// count adds d to its interval's bucket, unless the interval is older than
// the ones kept.
func (l *DecisionLog) count(t time.Time, d *Decision) {
	idx := l.interval(t)
	b := &l.buckets[mod(idx, len(l.buckets))]
	switch {
	case b.index > idx:
		return
	case b.index < idx:
		*b = bucket{index: idx}
	}
	b.decisions++
	b.prompt += uint64(d.PromptBlocks)
	b.matched += uint64(d.Matched)
	if d.RandomMatched >= 0 {
		b.random += d.RandomMatched
		b.knownPrompt += uint64(d.PromptBlocks)
	}
}

func (l *DecisionLog) interval(t time.Time) int64 {
	ns := t.UnixNano()
	i := ns / int64(l.cfg.Interval)
	if ns < 0 && ns%int64(l.cfg.Interval) != 0 {
		i--
	}
	return i
}

func mod(i int64, n int) int {
	m := int(i % int64(n))
	if m < 0 {
		m += n
	}
	return m
}

// Recent returns copies of the kept decisions, newest first.
func (l *DecisionLog) Recent() []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Decision, l.stored)
	for i := range out {
		d := l.ring[mod(int64(l.next-1-i), len(l.ring))]
		d.Candidates = append([]Candidate(nil), d.Candidates...)
		out[i] = d
	}
	return out
}

// Sample is one interval's decisions.
type Sample struct {
	Start     time.Time
	Decisions uint64
	// HitRate is matched / prompt blocks of the chosen workers, RoundRobin
	// the same for a uniformly random candidate (the decisions that knew
	// it); NaN where the interval has no prompt blocks.
	HitRate, RoundRobin float64
	// The blocks behind them: Prompt and Matched of every decision, Random
	// and KnownPrompt of those that knew their round-robin estimate.
	Prompt, Matched, KnownPrompt uint64
	Random                       float64
}

// Samples returns the kept intervals up to now's, oldest first: Samples of
// them, empty ones included.
func (l *DecisionLog) Samples(now time.Time) []Sample {
	last := l.interval(now)
	out := make([]Sample, len(l.buckets))
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range out {
		idx := last - int64(len(out)-1-i)
		s := Sample{Start: time.Unix(0, idx*int64(l.cfg.Interval)), HitRate: math.NaN(), RoundRobin: math.NaN()}
		if b := l.buckets[mod(idx, len(l.buckets))]; b.index == idx {
			s.Decisions, s.Prompt, s.Matched = b.decisions, b.prompt, b.matched
			s.Random, s.KnownPrompt = b.random, b.knownPrompt
			if b.prompt > 0 {
				s.HitRate = float64(b.matched) / float64(b.prompt)
			}
			if b.knownPrompt > 0 {
				s.RoundRobin = b.random / float64(b.knownPrompt)
			}
		}
		out[i] = s
	}
	return out
}
