package status

import (
	"fmt"
	"time"
)

// fixtureNow is the page's clock in the rendering tests.
var fixtureNow = time.Date(2026, 12, 3, 21, 30, 0, 0, time.UTC)

// fixtureRanks are five ranks of four workers: healthy, inexact,
// disconnected, and refusing stores.
func fixtureRanks() []Rank {
	return []Rank{
		{Worker: "vllm-a", Model: "llama-3-8b", DPRank: 0, Connected: true, LastSeq: 18231, LagSeconds: 0.0042, CachedBlocks: 3120, CapacityBlocks: 4096},
		{Worker: "vllm-a", Model: "llama-3-8b", DPRank: 1, Connected: true, LastSeq: 17002, LagSeconds: 0.0031, CachedBlocks: 2987, CapacityBlocks: 4096},
		{Worker: "vllm-b", Model: "llama-3-8b", DPRank: 0, Connected: true, LastSeq: 9120, LagSeconds: 0.0051, CachedBlocks: 1544, CapacityBlocks: 4096,
			Inexact: true, InexactSinceSeq: 8811, Restore: "rebuilt"},
		{Worker: "vllm-c", Model: "llama-3-8b", DPRank: 0, Connected: false, LastSeq: 40210, LagSeconds: 12.5, CachedBlocks: 802},
		{Worker: "sglang-d", Model: "qwen-7b", DPRank: 0, Connected: true, LastSeq: 551, LagSeconds: -1, CachedBlocks: 0,
			Problems: []Problem{{Reason: "block_size_mismatch", Count: 37, Detail: "engine block size 32, registered 16"}}},
	}
}

// fixtureLog is a log of decisions over the 15 minutes up to fixtureNow:
// the router's hit rate climbing from 30% to 80% as caches warm, round
// robin's estimate steady near 25%, then the last decisions with their
// candidates.
func fixtureLog() *DecisionLog {
	l := NewDecisionLog(LogConfig{Decisions: 12, Candidates: 4, Interval: 10 * time.Second, Samples: 90})
	start := fixtureNow.Add(-15 * time.Minute)
	for i := range 90 {
		if i%23 == 7 {
			continue // an idle interval: a break in the lines
		}
		hit := 0.3 + 0.5*float64(i)/89
		for k := range 4 {
			l.Add(&Decision{Time: start.Add(time.Duration(i)*10*time.Second + time.Duration(k)*time.Second),
				WorkerID: "vllm-a", Matched: uint32(hit * 40), PromptBlocks: 40, RandomMatched: 10 + float64(i%3)}, nil)
		}
	}
	reasons := []string{"cache", "cache", "load", "guard", "sampled", "cache"}
	for i := range 6 {
		chosen := Candidate{WorkerID: "vllm-a", DPRank: uint32(i % 2), Matched: uint32(30 - i), PrefillBlocks: float64(2 + i), DecodeBlocks: 14.5, Cost: float64(16 + i)}
		cands := []Candidate{chosen,
			{WorkerID: "vllm-b", Matched: 12, PrefillBlocks: 20, DecodeBlocks: 9.25, Cost: 29.25},
			{WorkerID: "vllm-c", Matched: 0, PrefillBlocks: 32, DecodeBlocks: 3, Cost: 35},
			{WorkerID: "sglang-d", Matched: 0, PrefillBlocks: 32, DecodeBlocks: 4, Cost: 36},
			{WorkerID: "vllm-e", Matched: 0, PrefillBlocks: 32, DecodeBlocks: 8, Cost: 40},
		}
		l.Add(&Decision{Time: fixtureNow.Add(time.Duration(i-6) * time.Second), Model: "llama-3-8b",
			RequestID: fmt.Sprintf("req-%04d", 7000+i), WorkerID: chosen.WorkerID, DPRank: chosen.DPRank,
			Reason: reasons[i], Matched: chosen.Matched, PromptBlocks: 32, RandomMatched: 10.5,
			Cost: chosen.Cost}, cands)
	}
	return l
}
