package radix

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Benchmarks run against one full-size index built once per process (see
// benchSetup): KVROUTER_BENCH_WORKERS workers (default 1000) x
// KVROUTER_BENCH_CAPACITY blocks (default 16384), with the naive baseline
// built from the same events. Every event stream applied to one is applied to
// the other too, so both stay equal to the workload's simulated caches.
//
//	go test -run '^$' -bench . -benchmem -benchtime 2s ./internal/radix/

type benchState struct {
	wl   *workload
	ix   *Index
	base *baseline

	residencies  uint64
	bytesPerRes  float64
	baseBytesRes float64
	buildEvents  int
	buildIndex   time.Duration
	buildBase    time.Duration
	buildErrs    int
	accounted    float64 // accountedBytes per residency after the build

	prompts [][]uint64 // 512-block prompts continuing popular conversations
	scores  float64    // mean workers scored per prompt
	depth   float64    // mean matched depth
}

var (
	benchOnce sync.Once
	bench     *benchState
)

func benchSetup(b *testing.B) *benchState {
	benchOnce.Do(func() { bench = buildBench(b) })
	return bench
}

func buildBench(b *testing.B) *benchState {
	cfg := benchConfig()
	st := &benchState{wl: newWorkload(cfg)}
	start := time.Now()
	logs := make([]*wlLog, cfg.workers)
	for i, ww := range st.wl.workers {
		logs[i] = &wlLog{}
		st.wl.warm(ww, logs[i])
		st.buildEvents += logs[i].blocks
	}
	b.Logf("workload: %d workers x %d blocks, %d block events generated in %v",
		cfg.workers, cfg.capacity, st.buildEvents, time.Since(start).Round(time.Millisecond))

	h0 := heapAlloc()
	st.ix = New(Config{SegmentBlocks: envInt("KVROUTER_BENCH_SEGMENT", 0)})
	start = time.Now()
	st.buildErrs = parallelApply(cfg.workers, func(i int) int { return applyLog(st.ix, st.wl, logs[i]) })
	st.buildIndex = time.Since(start)
	h1 := heapAlloc()
	stats := st.ix.Stats()
	st.residencies = stats.Residencies
	st.bytesPerRes = float64(h1-h0) / float64(st.residencies)
	st.accounted = float64(accountedBytes(st.ix)) / float64(st.residencies)

	st.base = newBaseline(cfg.workers)
	start = time.Now()
	for _, l := range logs {
		st.base.apply(l)
	}
	st.buildBase = time.Since(start)
	h2 := heapAlloc()
	st.baseBytesRes = float64(h2-h1) / float64(st.residencies)
	b.Logf("index: %d residencies, %d nodes, %.1f bytes/residency, built in %v (%d errors); baseline %.1f bytes/residency, built in %v",
		st.residencies, stats.Nodes, st.bytesPerRes, st.buildIndex.Round(time.Millisecond), st.buildErrs,
		st.baseBytesRes, st.buildBase.Round(time.Millisecond))

	// The next turn of each of the 64 most popular conversations, cut to
	// the longest prompt: workers hold its prefixes to many different depths.
	for c := range uint64(64) {
		st.prompts = append(st.prompts, st.wl.prompt(c, -1, nil))
	}
	var out []Score
	var bo []baseScore
	var act []int32
	for _, p := range st.prompts {
		out = st.ix.Match(p, out)
		bo, act = st.base.match(p, bo, act)
		if len(out) != len(bo) {
			b.Fatalf("index scores %d workers, baseline %d", len(out), len(bo))
		}
		for _, s := range out {
			st.depth += float64(s.Matched)
		}
		st.scores += float64(len(out))
	}
	if st.scores > 0 {
		st.depth /= st.scores
	}
	st.scores /= float64(len(st.prompts))
	b.Logf("match prompts: %d of %d blocks, %.0f workers scored and %.1f blocks matched on average; %s",
		len(st.prompts), cfg.maxLen, st.scores, st.depth, walkStats(st.ix, st.prompts))
	return st
}

// walkStats describes the walks of prompts: how many holder-set changes
// (where Match merges) they meet, how many nodes they visit, how many of
// those steps find the next node at the next id (where Match does not probe
// the child map), and how many cross into another segment (which Match finds
// under a shard's root).
func walkStats(ix *Index, prompts [][]uint64) string {
	var changes, nodes, sizes, seq, segs int
	for _, p := range prompts {
		k, id, cur := uint64(rootKey), uint32(rootID), uint32(noSet)
		var sh *shard
		for d, h := range p {
			k = pathKey(k, h)
			if ix.segmentStart(uint32(d)) {
				if sh != nil {
					sh.mu.RUnlock()
				}
				sh = ix.shards[ix.shardOf(k)]
				sh.mu.RLock()
				id, cur = rootID, noSet
			}
			nid, ok := sh.lookup(id, k)
			if !ok {
				break
			}
			if id == rootID && d > 0 {
				segs++
			}
			if nid == id+1 && id != rootID {
				seq++
			}
			id = nid
			nodes++
			if s := sh.meta(id).set; s != cur {
				changes++
				sizes += int(sh.sets[s].bits.n)
				cur = s
			}
		}
		sh.mu.RUnlock()
	}
	n := float64(len(prompts))
	return fmt.Sprintf("per prompt %.1f nodes walked (%.1f%% of steps within a segment to the next id), %.1f segments entered after the first, %.1f set changes, %.0f mean set size at a change",
		float64(nodes)/n, 100*float64(seq)/float64(max(nodes-len(prompts)-segs, 1)), float64(segs)/n, float64(changes)/n, float64(sizes)/float64(max(changes, 1)))
}

// cpuTime is the process's user+system CPU time: on a shared machine it
// measures work where wall time also measures waiting for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// parallelApply runs f(i) for every worker i, GOMAXPROCS goroutines each
// owning the workers i % GOMAXPROCS == g, and sums the results.
func parallelApply(n int, f func(i int) int) int {
	g := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	var sum atomic.Int64
	for p := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := 0
			for i := p; i < n; i += g {
				s += f(i)
			}
			sum.Add(int64(s))
		}()
	}
	wg.Wait()
	return int(sum.Load())
}

// BenchmarkMemory reports heap bytes per (block, worker) residency of the
// full index and of the baseline, both measured by the setup after GC.
func BenchmarkMemory(b *testing.B) {
	st := benchSetup(b)
	for range b.N {
	}
	b.ReportMetric(st.bytesPerRes, "bytes/residency")
	b.ReportMetric(st.baseBytesRes, "baseline-bytes/residency")
	b.ReportMetric(st.baseBytesRes/st.bytesPerRes, "baseline/index")
	b.ReportMetric(st.accounted, "accounted-bytes/residency")
	b.ReportMetric(float64(st.residencies), "residencies")
}

// BenchmarkEvents applies churn (the stores and evictions of further
// requests on the full fleet) with one writer and with GOMAXPROCS writers,
// each owning a disjoint set of workers, as ingest does. One op is one block
// event (a block stored or removed).
func BenchmarkEvents(b *testing.B) {
	st := benchSetup(b)
	for _, writers := range []int{1, runtime.GOMAXPROCS(0)} {
		for _, target := range []string{"index", "baseline"} {
			b.Run(fmt.Sprintf("%s/writers=%d", target, writers), func(b *testing.B) {
				logs := make([]*wlLog, writers)
				total := 0
				for g := range logs {
					logs[g] = st.wl.churn(max(b.N/writers, 1), g, writers)
					total += logs[g].blocks
				}
				var errs atomic.Int64
				applyIndex := func(g int) { errs.Add(int64(applyLog(st.ix, st.wl, logs[g]))) }
				applyBase := func(g int) { st.base.apply(logs[g]) }
				timed, other := applyIndex, applyBase
				if target == "baseline" {
					timed, other = applyBase, applyIndex
				}
				runtime.GC()
				b.ResetTimer()
				start, cpu0 := time.Now(), cpuTime()
				// (labelled, so that a -test.cpuprofile can be focused on it:
				// go tool pprof -tagfocus phase=timed)
				pprof.Do(context.Background(), pprof.Labels("phase", "timed"), func(context.Context) { runWriters(writers, timed) })
				el, cpu := time.Since(start), cpuTime()-cpu0
				b.StopTimer()
				runWriters(writers, other)
				b.ReportMetric(float64(total)/el.Seconds(), "events/s")
				b.ReportMetric(float64(total)/el.Seconds()/float64(writers), "events/s/writer")
				b.ReportMetric(float64(total)/cpu.Seconds(), "events/cpu-s")
				if e := errs.Load(); e > 0 {
					b.Errorf("%d index errors applying churn", e)
				}
			})
		}
	}
}

func runWriters(n int, f func(g int)) {
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(g)
		}()
	}
	wg.Wait()
}

// BenchmarkMatch512 matches 512-block prompts of popular conversations
// against the full index: one op is one match.
func BenchmarkMatch512(b *testing.B) {
	st := benchSetup(b)
	b.Run("index", func(b *testing.B) {
		st.timeMatches(b)
		b.ReportMetric(st.scores, "workers/match")
	})
	b.Run("index-parallel", func(b *testing.B) {
		b.ReportAllocs()
		var n atomic.Int64
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			out := make([]Score, 0, len(st.wl.workers))
			i := int(n.Add(1)) * 7
			for pb.Next() {
				out = st.ix.Match(st.prompts[i%len(st.prompts)], out)
				i++
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "matches/s")
	})
	b.Run("index-offloaded", st.timeOffloadedMatches)
	b.Run("baseline", func(b *testing.B) {
		var out []baseScore
		var act []int32
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		for i := range b.N {
			out, act = st.base.match(st.prompts[i%len(st.prompts)], out, act)
		}
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/match")
	})
}

// timeOffloadedMatches is timeMatches with every 4th worker's copies of the
// prompts' blocks moved from the device to the host tier (as an engine
// offloading to CPU memory reports them), so that Match keeps per-worker tier
// accounting; the index is put back as it was afterwards, and checked.
func (st *benchState) timeOffloadedMatches(b *testing.B) {
	before := make([][]Score, len(st.prompts))
	for i, p := range st.prompts {
		before[i] = st.ix.Match(p, nil)
	}
	move := func(from, to kv.Tier) int {
		moved := 0
		for wi := 0; wi < len(st.wl.workers); wi += 4 {
			ww := st.wl.workers[wi]
			for _, p := range st.prompts {
				var path, eh uint64
				ehs := make([]uint64, 0, len(p))
				for _, bh := range p {
					if path, eh = ww.engineHash(path, bh); st.ix.holds(ww.w, eh, from) {
						ehs = append(ehs, eh)
					}
				}
				if st.ix.StoreTier(ww.w, ehs, to) != nil || st.ix.Remove(ww.w, ehs, from) != nil {
					b.Fatalf("moving %s's blocks from tier %d to %d failed", ww.w, from, to)
				}
				moved += len(ehs)
			}
		}
		return moved
	}
	moved := move(kv.TierDevice, kv.TierHost)
	b.Logf("offloaded: %d block copies moved to the host tier; %s", moved, walkStats(st.ix, st.prompts))
	var host float64
	for _, p := range st.prompts {
		for _, sc := range st.ix.Match(p, nil) {
			host += float64(sc.ByTier[kv.TierHost])
		}
	}
	st.timeMatches(b)
	b.ReportMetric(host/float64(len(st.prompts)), "host-blocks/match")
	b.StopTimer()
	if back := move(kv.TierHost, kv.TierDevice); back != moved || host == 0 {
		b.Fatalf("moved %d block copies to the host tier (%v matched there) and %d back", moved, host, back)
	}
	for i, p := range st.prompts {
		if got := st.ix.Match(p, nil); !slices.Equal(got, before[i]) {
			b.Fatalf("prompt %d matches differently after the blocks moved back", i)
		}
	}
}

// timeMatches times b.N matches of the prompts in turn, reusing one out, and
// reports their CPU time.
func (st *benchState) timeMatches(b *testing.B) {
	out := make([]Score, 0, len(st.wl.workers))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		out = st.ix.Match(st.prompts[i%len(st.prompts)], out)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/match")
}

// BenchmarkMixed applies churn with one writer at full speed while
// GOMAXPROCS goroutines match 512-block prompts until the writer is done.
// One op is one block event; matches/s and the writer's events/s over the
// same window are reported.
func BenchmarkMixed(b *testing.B) {
	st := benchSetup(b)
	for _, target := range []string{"index", "baseline"} {
		b.Run(target, func(b *testing.B) {
			log := st.wl.churn(b.N, 0, 1)
			match := func() func(p []uint64) {
				if target == "index" {
					out := make([]Score, 0, len(st.wl.workers))
					return func(p []uint64) { out = st.ix.Match(p, out) }
				}
				var out []baseScore
				var act []int32
				return func(p []uint64) { out, act = st.base.match(p, out, act) }
			}
			runtime.GC()
			var matches atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range runtime.GOMAXPROCS(0) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := match()
					for i := g * 13; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						m(st.prompts[i%len(st.prompts)])
						matches.Add(1)
					}
				}()
			}
			b.ResetTimer()
			start := time.Now()
			if target == "index" {
				applyLog(st.ix, st.wl, log)
			} else {
				st.base.apply(log)
			}
			el := time.Since(start)
			close(stop)
			b.StopTimer()
			n := matches.Load()
			wg.Wait()
			// Keep the other structure in step with the workload.
			if target == "index" {
				st.base.apply(log)
			} else {
				applyLog(st.ix, st.wl, log)
			}
			b.ReportMetric(float64(n)/el.Seconds(), "matches/s")
			b.ReportMetric(float64(log.blocks)/el.Seconds(), "writer-events/s")
		})
	}
}

// accountedBytes adds up the index's own arrays, tables and sets (map
// overheads estimated): a heap-independent view of its size that can be taken
// while the baseline is alive too.
func accountedBytes(ix *Index) uint64 {
	var n uint64
	for _, sh := range ix.shards {
		sh.mu.RLock()
		n += uint64(len(sh.chunks)) * uint64(unsafe.Sizeof(nodeChunk{}))
		n += uint64(cap(sh.free)) * 4
		n += uint64(len(sh.kids.slots)) * 16
		n += uint64(cap(sh.sets)) * uint64(unsafe.Sizeof(hset{}))
		for i := range sh.sets {
			n += uint64(cap(sh.sets[i].e)+cap(sh.sets[i].bits.bm)) * 8
		}
		n += uint64(cap(sh.freeSets)) * 4
		n += uint64(len(sh.intern.slots)) * 16
		sh.mu.RUnlock()
	}
	for _, ws := range ix.reg.all() {
		ws.mu.Lock()
		n += uint64(len(ws.blocks.slots)) * 16
		ws.mu.Unlock()
	}
	return n
}

// BenchmarkMemoryAfterChurn runs last: after every churn stream above, the
// index's accounted size per residency must not have grown.
func BenchmarkMemoryAfterChurn(b *testing.B) {
	st := benchSetup(b)
	for range b.N {
	}
	s := st.ix.Stats()
	b.ReportMetric(float64(accountedBytes(st.ix))/float64(s.Residencies), "accounted-bytes/residency")
	b.ReportMetric(st.accounted, "accounted-bytes/residency-at-build")
	b.ReportMetric(float64(s.Residencies), "residencies")
	b.ReportMetric(float64(s.Nodes), "nodes")
}
