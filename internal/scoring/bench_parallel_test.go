package scoring

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// parallelFixture builds models models of 125 workers each, every worker
// holding a 32-block system prefix of its model and a random share of 8
// conversations extending it to 128 blocks (2,048 tokens): the per-Route
// work is the same for any number of models.
func parallelFixture(b *testing.B, models int) (*Router, [][][]uint32) {
	b.Helper()
	const workers, system, long = 125, 32, 128
	idx := radix.New(radix.Config{})
	r, err := New(Config{Index: idx, BlockSize: bs, Seed: 7})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	prompts := make([][][]uint32, models)
	seed := normalize.Seed("", "")
	for m := range models {
		sys := make([]uint32, system*bs)
		for i := range sys {
			sys[i] = rng.Uint32N(100000)
		}
		for range 8 {
			p := append([]uint32(nil), sys...)
			for len(p) < long*bs {
				p = append(p, rng.Uint32N(100000))
			}
			prompts[m] = append(prompts[m], p)
		}
		model := fmt.Sprint("m", m)
		for w := range workers {
			id := fmt.Sprintf("%s-w%03d", model, w)
			if err := r.AddWorker(Worker{ID: id, Model: model, Endpoint: id}); err != nil {
				b.Fatal(err)
			}
			p := prompts[m][rng.IntN(len(prompts[m]))]
			depth := system + rng.IntN(long-system)
			hashes := normalize.HashPrompt(seed, p[:depth*bs], bs, nil, nil)
			blocks := make([]kv.Block, len(hashes))
			for i, h := range hashes {
				blocks[i] = kv.Block{EngineHash: uint64(i + 1), BlockHash: h}
			}
			if err := idx.Store(kv.WorkerRank{ID: id}, 0, false, kv.TierDevice, blocks); err != nil {
				b.Fatal(err)
			}
		}
	}
	return r, prompts
}

// BenchmarkRouteParallel measures Routes of 2,048-token prompts from
// GOMAXPROCS goroutines (run it with -cpu 1,2) against one model or eight,
// each Route with a request id (so it records load and predictions), the
// goroutine's request from 64 Routes before finished after it. With eight
// models each goroutine picks one at random for each Route, so two Routes at
// once are of one model one time in eight. routes/s is the throughput; it
// grows with goroutines as far as Routes do not wait for each other's locks
// (and the machine has the cores free).
func BenchmarkRouteParallel(b *testing.B) {
	for _, models := range []int{1, 8} {
		r, prompts := parallelFixture(b, models)
		var goroutine atomic.Int64 // (across the runs of b.Run: ids stay unique)
		b.Run(fmt.Sprintf("models=%d", models), func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				g := int(goroutine.Add(1))
				rng := rand.New(rand.NewPCG(uint64(g), 3))
				const inFlight = 64
				ids := make([]string, inFlight)
				for i := 0; pb.Next(); i++ {
					m := rng.IntN(models)
					id := fmt.Sprintf("g%d-%d", g, i)
					if old := ids[i%inFlight]; old != "" {
						if err := r.MarkFinished(old); err != nil {
							b.Error(err)
							return
						}
					}
					ids[i%inFlight] = id
					p := &Prompt{Model: fmt.Sprint("m", m), Tokens: prompts[m][rng.IntN(len(prompts[m]))]}
					if _, err := r.Route(p, id, 0, 8); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "routes/s")
			// The process's CPU time per Route: on a shared machine, where
			// wall time depends on what else runs, the cost of a Route.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
