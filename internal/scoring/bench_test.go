package scoring

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// benchWorkers is the fleet size for the Route benchmarks (KVROUTER_BENCH_WORKERS).
func benchWorkers() int {
	if n, err := strconv.Atoi(os.Getenv("KVROUTER_BENCH_WORKERS")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// routeFixture builds a fleet where every worker holds a shared 64-block system
// prefix and a random share of 8 conversations that extend it to 512 blocks.
func routeFixture(b *testing.B, predict bool) (*Router, [][]uint32) {
	b.Helper()
	n := benchWorkers()
	idx := radix.New(radix.Config{})
	r, err := New(Config{Index: idx, BlockSize: bs, DisablePrediction: !predict, Seed: 7})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	system := make([]uint32, 64*bs)
	for i := range system {
		system[i] = rng.Uint32N(100000)
	}
	prompts := make([][]uint32, 8)
	for c := range prompts {
		p := append([]uint32(nil), system...)
		for len(p) < 512*bs {
			p = append(p, rng.Uint32N(100000))
		}
		prompts[c] = p
	}
	seed := normalize.Seed("", "")
	for w := range n {
		id := fmt.Sprintf("w%04d", w)
		if err := r.AddWorker(Worker{ID: id, Model: "m", Endpoint: id}); err != nil {
			b.Fatal(err)
		}
		p := prompts[rng.IntN(len(prompts))]
		depth := 64 + rng.IntN(512-64)
		hashes := normalize.HashPrompt(seed, p[:depth*bs], bs, nil, nil)
		blocks := make([]kv.Block, len(hashes))
		for i, h := range hashes {
			blocks[i] = kv.Block{EngineHash: uint64(i + 1), BlockHash: h}
		}
		if err := idx.Store(kv.WorkerRank{ID: id}, 0, false, kv.TierDevice, blocks); err != nil {
			b.Fatal(err)
		}
	}
	return r, prompts
}

// BenchmarkRoute measures one Route of a 512-block (8,192-token) prompt
// against the fleet, hashing included, with every candidate or the 8 cheapest
// in the decision.
func BenchmarkRoute(b *testing.B) {
	for _, predict := range []bool{false, true} {
		r, prompts := routeFixture(b, predict)
		for _, limit := range []int{0, 8} {
			b.Run(fmt.Sprintf("workers=%d/predict=%v/max_candidates=%d", benchWorkers(), predict, limit), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, err := r.Route(&Prompt{Model: "m", Tokens: prompts[i%len(prompts)]}, "", 0, limit); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkRouteLoaded is BenchmarkRoute (no prediction, every candidate)
// with each Route given a request id, so its load counts (and the
// bounded-load guard has loads to compare): 2,000 requests stay in flight,
// the oldest finished after each Route.
func BenchmarkRouteLoaded(b *testing.B) {
	r, prompts := routeFixture(b, false)
	const inFlight = 2000
	b.Run(fmt.Sprintf("workers=%d", benchWorkers()), func(b *testing.B) {
		b.ReportAllocs()
		ids := make([]string, 1<<16)
		for i := range ids {
			ids[i] = fmt.Sprint("q", i)
		}
		i := 0
		for b.Loop() {
			if _, err := r.Route(&Prompt{Model: "m", Tokens: prompts[i%len(prompts)]}, ids[i%len(ids)], 0, 0); err != nil {
				b.Fatal(err)
			}
			if i >= inFlight {
				if err := r.MarkFinished(ids[(i-inFlight)%len(ids)]); err != nil {
					b.Fatal(err)
				}
			}
			i++
		}
	})
}

// BenchmarkScore measures Score of a 512-block prompt, hashing included.
func BenchmarkScore(b *testing.B) {
	r, prompts := routeFixture(b, false)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := r.Score(&Prompt{Model: "m", Tokens: prompts[i%len(prompts)]}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkHashPrompt is the hashing share of a Route: 8,192 tokens.
func BenchmarkHashPrompt(b *testing.B) {
	toks := make([]uint32, 512*bs)
	out := make([]uint64, 0, 512)
	seed := normalize.Seed("", "")
	b.SetBytes(int64(4 * len(toks)))
	for b.Loop() {
		out = normalize.HashPrompt(seed, toks, bs, nil, out[:0])
	}
}

// BenchmarkRouteWithManyActive is a Route with request_id while 200,000 routed
// requests are active and none has expired, with the clock moving a second per
// call: expiry must look only at the requests that expire, not at every
// active one.
func BenchmarkRouteWithManyActive(b *testing.B) {
	var t time.Time
	clock := func() time.Time { t = t.Add(time.Second); return t }
	r, err := New(Config{Index: radix.New(radix.Config{}), BlockSize: bs, now: clock, RequestTTL: 1000 * time.Hour, MaxActiveRequests: 1 << 20, Seed: 7})
	if err != nil {
		b.Fatal(err)
	}
	for w := range 4 {
		if err := r.AddWorker(Worker{ID: fmt.Sprint("w", w), Model: "m"}); err != nil {
			b.Fatal(err)
		}
	}
	p := &Prompt{Model: "m", Tokens: make([]uint32, 4*bs)}
	rk := r.ranks[kv.WorkerRank{ID: "w0"}]
	for i := range 200_000 {
		if err := r.load.add(fmt.Sprint("old", i), rk, 4, 4*bs, 4, clock().Add(r.cfg.RequestTTL)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := fmt.Sprint("new", i)
		if _, err := r.Route(p, id, 0, 0); err != nil {
			b.Fatal(err)
		}
		if err := r.MarkFinished(id); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkScoreManyItems is one Score of a 262,144-token prompt with
// multimodal items spread over it (4 tokens each, each id a 64-hex-digit
// content hash): 1,024 is the default limit, 40,000 the attack of issue 20,
// refused past the limit, and hashed in full with the limit raised to 40,000.
// cpu-ms/op is the process CPU time of one call.
func BenchmarkScoreManyItems(b *testing.B) {
	const nTokens = 262144
	toks := make([]uint32, nTokens)
	for i := range toks {
		toks[i] = uint32(i)
	}
	for _, c := range []struct{ n, limit int }{{1024, 0}, {40000, 0}, {40000, 40000}} {
		r, err := New(Config{Index: radix.New(radix.Config{}), BlockSize: bs, Seed: 7, MaxMMItems: c.limit})
		if err != nil {
			b.Fatal(err)
		}
		if err := r.AddWorker(Worker{ID: "w", Model: "m"}); err != nil {
			b.Fatal(err)
		}
		n := c.n
		b.Run(fmt.Sprintf("items=%d/limit=%d", n, r.Limits().MaxMMItems), func(b *testing.B) {
			p := &Prompt{Model: "m", Tokens: toks, MM: make([]MMItem, n)}
			step := nTokens / n
			for i := range p.MM {
				p.MM[i] = MMItem{Hash: fmt.Sprintf("%064x", i+1), Offset: uint32(i * step), Length: 4}
			}
			refused := 0
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := r.Score(p); err != nil {
					if !errors.Is(err, ErrInvalidArgument) {
						b.Fatal(err)
					}
					refused = 1
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(refused), "refused")
		})
	}
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
