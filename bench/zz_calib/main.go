package main

import (
	"flag"
	"fmt"
	"math/rand"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/stats"
	"github.com/kvrouter/kvrouter/bench/trace"
)

type active struct {
	blocks      int
	prefillDone time.Duration
	finish      time.Duration
	uncached    int
}

func main() {
	capb := flag.Int("cap", 8192, "")
	n := flag.Int("n", 16, "")
	pf := flag.Duration("pf", 300*time.Microsecond, "")
	dec := flag.Duration("dec", 20*time.Millisecond, "")
	pw := flag.Float64("pw", 1, "")
	ceil := flag.Bool("ceil", false, "")
	pols := flag.String("pol", "rr,random,kv", "")
	flag.Parse()
	reqs, _ := trace.Load("/work/shared/traces/conversation_trace.jsonl", 0)
	if *ceil {
		for _, c := range []int{2048, 4096, 8192, 16384, 32768} {
			fmt.Printf("cap %d x %d: ceiling %.3f\n", c, *n, trace.PooledCeiling(reqs, 16, c**n).HitRate())
		}
		return
	}
	var tot float64
	for _, r := range reqs {
		tot += float64(r.InputLength)
	}
	fmt.Printf("reqs %d mean input %.0f span %v\n", len(reqs), tot/float64(len(reqs)), reqs[len(reqs)-1].Arrival)
	for _, pol := range strings.Split(*pols, ",") {
		engs := make([]*engine.Engine, *n)
		for i := range engs {
			engs[i], _ = engine.New(engine.Config{ID: fmt.Sprint(i), CapacityBlocks: *capb, PrefillPerToken: *pf, DecodePerToken: *dec, HashSeed: 0})
		}
		act := make([][]active, *n)
		rng := rand.New(rand.NewSource(1))
		var ttft []time.Duration
		var pb, cb uint64
		load := make([]float64, *n)
		var toks []uint32
		for i, r := range reqs {
			toks = r.Tokens(toks[:0])
			var w int
			switch pol {
			case "rr":
				w = i % *n
			case "random":
				w = rng.Intn(*n)
			default:
				hs := engs[0].BlockHashes(toks, nil)
				best := 1e18
				for j := range engs {
					// overlap
					c := engine.NewCache(1)
					_ = c
					ov := engs[j].Overlap(hs)
					var apf, dcb float64
					k := 0
					for _, a := range act[j] {
						if a.finish <= r.Arrival {
							continue
						}
						act[j][k] = a
						k++
						if a.prefillDone > r.Arrival {
							apf += float64(a.uncached)
						} else {
							dcb += float64(a.blocks)
						}
					}
					act[j] = act[j][:k]
					cost := *pw*(float64(len(hs)-ov)+apf) + dcb
					if pol == "kvnoload" {
						cost = float64(len(hs) - ov)
					}
					if cost < best {
						best, w = cost, j
					}
				}
			}
			res := engs[w].Serve(engine.Request{Tokens: toks, OutputTokens: r.OutputLength, Arrival: r.Arrival})
			act[w] = append(act[w], active{blocks: len(toks) / 16, prefillDone: res.PrefillDone, finish: res.Finish, uncached: res.UncachedTokens / 16})
			ttft = append(ttft, res.TTFT(r.Arrival))
			pb += uint64(res.PromptBlocks)
			cb += uint64(res.CachedBlocks)
			load[w] += float64(len(toks))
		}
		s := stats.Summarize(ttft)
		fmt.Printf("%-8s hit %.3f imb %.2f ttft p50 %v p99 %v\n", pol, float64(cb)/float64(pb), stats.Imbalance(load), s.P50, s.P99)
		for _, e := range engs {
			e.Close()
		}
	}
}
