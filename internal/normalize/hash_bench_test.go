package normalize

import (
	"fmt"
	"testing"
	"time"
)

// spreadItems returns n items of itemLen tokens spread evenly over nTokens
// tokens, in prompt order (the multimodal shape of the attack in issue 20:
// 40,000 items over 262,144 tokens).
func spreadItems(n, nTokens, itemLen int) []MMItem {
	if n == 0 {
		return nil
	}
	items := make([]MMItem, n)
	step := nTokens / n
	for i := range items {
		items[i] = MMItem{Hash: uint64(i)*0x9e3779b97f4a7c15 + 1, Offset: uint32(i * step), Length: uint32(min(itemLen, step))}
	}
	return items
}

// BenchmarkHashPromptItems hashes a 262,144-token prompt (16,384 blocks)
// with many multimodal items; cpu-ms/op is the process CPU time of one call.
// "spread" items are 4 tokens each, evenly spaced (the attack of issue 20 at
// 40,000); "whole" items each cover the whole prompt, so every block mixes in
// every item: the most hash input a prompt at the scoring limit of 1,024
// items can ask for.
func BenchmarkHashPromptItems(b *testing.B) {
	const nTokens = 262144
	toks := seqTokens(1, nTokens)
	seed := Seed("", "")
	for _, c := range []struct {
		n     int
		whole bool
	}{{0, false}, {1024, false}, {40000, false}, {1024, true}} {
		name := fmt.Sprintf("items=%d/spread", c.n)
		if c.whole {
			name = fmt.Sprintf("items=%d/whole", c.n)
		}
		b.Run(name, func(b *testing.B) {
			n := c.n
			items := spreadItems(n, nTokens, 4)
			if c.whole {
				for i := range items {
					items[i].Offset, items[i].Length = 0, nTokens
				}
			}
			out := make([]uint64, 0, nTokens/16)
			b.ReportAllocs()
			cpu0, wall0 := cpuTime(), time.Now()
			for b.Loop() {
				out = HashPrompt(seed, toks, 16, items, out[:0])
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(time.Since(wall0))/float64(time.Millisecond)/float64(b.N), "wall-ms/op")
			b.ReportMetric(float64(len(items)), "items")
		})
	}
}
