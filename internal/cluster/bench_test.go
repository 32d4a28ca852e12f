package cluster

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// BenchmarkRegistryPropagation: a CreateWorker on replica A until replica
// B's registry watcher sees it (what B then does is start the worker's
// subscriptions: local work).
func BenchmarkRegistryPropagation(b *testing.B) {
	ns := natstest.Start(b)
	a, err := Connect(testConfig(ns.URL(), "a"))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	bn, err := Connect(testConfig(ns.URL(), "b"))
	if err != nil {
		b.Fatal(err)
	}
	defer bn.Close()
	seen := make(chan string, 16)
	loaded, err := bn.WatchWorkers(func(ev WorkerEvent) { seen <- ev.ID })
	if err != nil {
		b.Fatal(err)
	}
	<-loaded
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("w%d", i)
		start := time.Now()
		if _, err := a.CreateWorker(context.Background(), id, []byte("v")); err != nil {
			b.Fatal(err)
		}
		for got := <-seen; got != id; got = <-seen {
		}
		lat = append(lat, time.Since(start))
	}
	reportQuantiles(b, lat, "reg")
}

func reportQuantiles(b *testing.B, lat []time.Duration, name string) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) }
	b.ReportMetric(q(0.5), name+"-p50-µs")
	b.ReportMetric(q(0.99), name+"-p99-µs")
}

// signalling wraps B's Router to note when a request's Route is applied.
type signalling struct {
	*scoring.Router
	mu      sync.Mutex
	waiting map[string]chan struct{}
}

func (s *signalling) ApplyRemote(origin string, c *scoring.LoadChange) error {
	err := s.Router.ApplyRemote(origin, c)
	if c.Kind == scoring.ChangeRoute {
		s.mu.Lock()
		if ch := s.waiting[c.RequestID]; ch != nil {
			close(ch)
			delete(s.waiting, c.RequestID)
		}
		s.mu.Unlock()
	}
	return err
}

func (s *signalling) wait(id string) chan struct{} {
	ch := make(chan struct{})
	s.mu.Lock()
	s.waiting[id] = ch
	s.mu.Unlock()
	return ch
}

// newBenchRouter is a router of 8 workers; forward, when not nil, is its
// Config.Forward.
func newBenchRouter(b *testing.B, onChange func(scoring.LoadChange), forward func(*scoring.ForwardedRoute, *scoring.Decision) (bool, error)) *scoring.Router {
	r, err := scoring.New(scoring.Config{Index: radix.New(radix.Config{}), OnChange: onChange, Forward: forward, Seed: 1, RequestTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 8 {
		if err := r.AddWorker(scoring.Worker{ID: fmt.Sprintf("w%d", i), Model: "m"}); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// benchPrompts are 1,024-token prompts (64 blocks) over 32 shared prefixes.
func benchPrompts() []*scoring.Prompt {
	out := make([]*scoring.Prompt, 256)
	for i := range out {
		toks := make([]uint32, 1024)
		for j := range toks {
			toks[j] = uint32((i%32)*100_000 + j)
			if j >= 512 {
				toks[j] += uint32(i * 7919)
			}
		}
		out[i] = &scoring.Prompt{Model: "m", Tokens: toks}
	}
	return out
}

// BenchmarkLoadSync: a Route with a request id on replica A until replica
// B has applied its load and predictions: one Route every 2ms ("paced":
// a quiet link, each change sent at once), back to back with its
// MarkFinished ("serial": the next Route waits in the finish's batch), and
// from 8 goroutines ("parallel": batching). Reports the lag's p50/p99 and NATS messages and bytes per
// Route.
func BenchmarkLoadSync(b *testing.B) {
	for _, mode := range []string{"paced", "serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			ns := natstest.Start(b)
			an, err := Connect(testConfig(ns.URL(), "a"))
			if err != nil {
				b.Fatal(err)
			}
			defer an.Close()
			bn, err := Connect(testConfig(ns.URL(), "b"))
			if err != nil {
				b.Fatal(err)
			}
			defer bn.Close()
			ra := newBenchRouter(b, an.Publish, nil)
			sb := &signalling{Router: newBenchRouter(b, bn.Publish, nil), waiting: map[string]chan struct{}{}}
			if _, err := an.StartLoad(ra); err != nil {
				b.Fatal(err)
			}
			if _, err := bn.StartLoad(sb); err != nil {
				b.Fatal(err)
			}
			prompts := benchPrompts()
			msgs0 := testutil.ToFloat64(an.metrics.messages.WithLabelValues("out"))
			bytes0 := testutil.ToFloat64(an.metrics.bytes.WithLabelValues("out"))
			var mu sync.Mutex
			lat := make([]time.Duration, 0, b.N)
			one := func(i int) {
				id := fmt.Sprintf("%s-%d", mode, i)
				ch := sb.wait(id)
				start := time.Now()
				if _, err := ra.Route(prompts[i%len(prompts)], id, 0, 0); err != nil {
					b.Error(err)
					return
				}
				<-ch
				d := time.Since(start)
				if mode == "paced" {
					// One Route every 2ms, its finish at the next:
					// the lag of a quiet link.
					time.Sleep(2 * time.Millisecond)
				}
				_ = ra.MarkFinished(id)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
			b.ResetTimer()
			if mode != "parallel" {
				for i := range b.N {
					one(i)
				}
			} else {
				var wg sync.WaitGroup
				next := make(chan int)
				for range 8 {
					wg.Go(func() {
						for i := range next {
							one(i)
						}
					})
				}
				for i := range b.N {
					next <- i
				}
				close(next)
				wg.Wait()
			}
			b.StopTimer()
			reportQuantiles(b, lat, "lag")
			// Each iteration is a Route and a MarkFinished.
			b.ReportMetric((testutil.ToFloat64(an.metrics.messages.WithLabelValues("out"))-msgs0)/float64(b.N), "msgs/route+finish")
			b.ReportMetric((testutil.ToFloat64(an.metrics.bytes.WithLabelValues("out"))-bytes0)/float64(b.N), "bytes/route+finish")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRouteCPU: Routes (with request id, then MarkFinished) on a
// router alone and on a replica publishing to NATS, alternated in blocks
// of 500 (A B B A A B ...) within one run so that both see the same
// machine. Reports the
// wall time per Route on the calling goroutine and the process CPU per
// Route (which, in cluster mode, includes the publisher, the NATS client
// and the in-process NATS server; no replica receives).
func BenchmarkRouteCPU(b *testing.B) {
	ns := natstest.Start(b)
	an, err := Connect(testConfig(ns.URL(), "a"))
	if err != nil {
		b.Fatal(err)
	}
	defer an.Close()
	single := newBenchRouter(b, nil, nil)
	clustered := newBenchRouter(b, an.Publish, nil)
	if _, err := an.StartLoad(clustered); err != nil {
		b.Fatal(err)
	}
	prompts := benchPrompts()
	var wall, cpu [2]time.Duration
	var n [2]int
	const block = 500
	b.ResetTimer()
	for round, i := 0, 0; i < b.N; round++ {
		for o := range 2 {
			m := o ^ round&1 // the order alternates too: A B, B A, ...
			r := []*scoring.Router{single, clustered}[m]
			k := min(block, b.N-i)
			if k <= 0 {
				break
			}
			w0, c0 := time.Now(), cpuTime()
			for j := range k {
				id := fmt.Sprintf("r%d", i+j)
				if _, err := r.Route(prompts[(i+j)%len(prompts)], id, 0, 0); err != nil {
					b.Fatal(err)
				}
				_ = r.MarkFinished(id)
			}
			wall[m] += time.Since(w0)
			cpu[m] += cpuTime() - c0
			n[m] += k
			i += k
		}
	}
	b.StopTimer()
	per := func(d time.Duration, k int) float64 { return float64(d.Nanoseconds()) / float64(max(k, 1)) }
	b.ReportMetric(per(wall[0], n[0]), "single-wall-ns/route")
	b.ReportMetric(per(wall[1], n[1]), "cluster-wall-ns/route")
	b.ReportMetric(per(cpu[0], n[0]), "single-cpu-ns/route")
	b.ReportMetric(per(cpu[1], n[1]), "cluster-cpu-ns/route")
	if n[0] > 0 && n[1] > 0 {
		b.ReportMetric(per(cpu[1], n[1])/per(cpu[0], n[0]), "cpu-ratio")
	}
}

// checkpointAll is a persist.Checkpointer over every rank of an index,
// with no stream positions.
type checkpointAll struct{ ranks []kv.WorkerRank }

func (c checkpointAll) Checkpoint(fn func(kv.WorkerRank, ingest.Position, []kv.WorkerRank) error) error {
	for _, r := range c.ranks {
		if err := fn(r, ingest.Position{}, []kv.WorkerRank{r}); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkBootstrapFromStore: the time a new replica takes to read the
// newest snapshot object back into an index: 16 ranks of 65,536 blocks
// each (1M residencies).
func BenchmarkBootstrapFromStore(b *testing.B) {
	ns := natstest.Start(b)
	n, err := Connect(testConfig(ns.URL(), "a"))
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	ix := radix.New(radix.Config{})
	var cp checkpointAll
	for r := range 16 {
		w := kv.WorkerRank{ID: fmt.Sprintf("w%d", r)}
		cp.ranks = append(cp.ranks, w)
		for run := range 64 {
			blocks := make([]kv.Block, 1024)
			for i := range blocks {
				blocks[i] = kv.Block{EngineHash: uint64(run<<20 | i + 1), BlockHash: uint64(r%4)<<40 | uint64(run)<<20 | uint64(i)}
			}
			if err := ix.Store(w, 0, false, kv.TierDevice, blocks); err != nil {
				b.Fatal(err)
			}
		}
	}
	obj, err := n.PutSnapshot(context.Background(), func(w io.Writer) error {
		_, err := persist.WriteSnapshot(w, ix, cp, 1)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(obj.Size))
	b.ResetTimer()
	for range b.N {
		r, err := n.OpenSnapshot(context.Background(), obj.Name)
		if err != nil {
			b.Fatal(err)
		}
		res, err := persist.ReadSnapshot(r, radix.Config{})
		r.Close()
		if err != nil {
			b.Fatal(err)
		}
		if res.Snapshot.Counts.Bindings != 16*65536 {
			b.Fatalf("restored %d residencies", res.Snapshot.Counts.Bindings)
		}
	}
	b.ReportMetric(float64(obj.Size)/(1<<20), "object-MiB")
}

// BenchmarkMarkSync: what a mark costs its caller in cluster mode. Each
// iteration Routes a request and marks it finished, then waits for Sync
// (what the server does before answering) in "sync" or not in "async";
// the two alternate in blocks of 200 within one run, on 1 or 8 callers,
// so both see the same machine. Reports the mark's wall time (MarkFinished,
// plus Sync in "sync") at p50 and p99, and messages published per request.
func BenchmarkMarkSync(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			ns := natstest.Start(b)
			an, err := Connect(testConfig(ns.URL(), "a"))
			if err != nil {
				b.Fatal(err)
			}
			defer an.Close()
			ra := newBenchRouter(b, an.Publish, nil)
			if _, err := an.StartLoad(ra); err != nil {
				b.Fatal(err)
			}
			prompts := benchPrompts()
			ctx := context.Background()
			var lat [2][]time.Duration
			var msgs [2]float64
			var n [2]int
			var mu sync.Mutex
			const block = 200
			b.ResetTimer()
			for done := 0; done < b.N; {
				for mode := range 2 { // 0 async, 1 sync
					k := min(block, b.N-done)
					if k <= 0 {
						break
					}
					m0 := testutil.ToFloat64(an.metrics.messages.WithLabelValues("out"))
					next := make(chan int)
					var wg sync.WaitGroup
					for range callers {
						wg.Go(func() {
							for i := range next {
								id := fmt.Sprintf("m%d", i)
								if _, err := ra.Route(prompts[i%len(prompts)], id, 0, 0); err != nil {
									b.Error(err)
									return
								}
								start := time.Now()
								_ = ra.MarkFinished(id)
								if mode == 1 {
									if err := an.Sync(ctx); err != nil {
										b.Error(err)
									}
								}
								d := time.Since(start)
								mu.Lock()
								lat[mode] = append(lat[mode], d)
								mu.Unlock()
							}
						})
					}
					for i := done; i < done+k; i++ {
						next <- i
					}
					close(next)
					wg.Wait()
					msgs[mode] += testutil.ToFloat64(an.metrics.messages.WithLabelValues("out")) - m0
					n[mode] += k
					done += k
				}
			}
			b.StopTimer()
			for mode, name := range []string{"async", "sync"} {
				if n[mode] == 0 {
					continue
				}
				reportQuantiles(b, lat[mode], name+"-mark")
				b.ReportMetric(msgs[mode]/float64(n[mode]), name+"-msgs/request")
			}
		})
	}
}

// BenchmarkForwardedRoute: a Route on a replica that forwards it to the
// deciding replica (over an in-process NATS server) against a Route
// decided where it arrives (on the decider), alternated in blocks of 200;
// the latencies' p50/p99 of each, a request id and its MarkFinished with
// every Route.
func BenchmarkForwardedRoute(b *testing.B) {
	ns := natstest.Start(b)
	// Both forward, as in leader mode; the decider's own Routes stay here.
	start := func(id string) (*Node, *scoring.Router) {
		n, err := Connect(testConfig(ns.URL(), id))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = n.Close() })
		r := newBenchRouter(b, n.Publish, n.Forward)
		if _, err := n.StartLoad(r); err != nil {
			b.Fatal(err)
		}
		if err := n.ServeDecisions(r.RouteForwarded); err != nil {
			b.Fatal(err)
		}
		return n, r
	}
	_, decider := start("a")
	fn, follower := start("b")
	eventually(b, "the follower names the decider", func() bool { return fn.Decider() == "a" })
	prompts := benchPrompts()
	lat := [2][]time.Duration{}
	const block = 200
	b.ResetTimer()
	for round, i := 0, 0; i < b.N; round++ {
		for o := range 2 {
			m := o ^ round&1
			r := []*scoring.Router{decider, follower}[m]
			for j := range min(block, b.N-i) {
				id := fmt.Sprintf("r%d", i+j)
				t0 := time.Now()
				if _, err := r.Route(prompts[(i+j)%len(prompts)], id, 0, 0); err != nil {
					b.Fatal(err)
				}
				lat[m] = append(lat[m], time.Since(t0))
				_ = r.MarkFinished(id)
			}
			i += min(block, b.N-i)
		}
	}
	b.StopTimer()
	if got := testutil.ToFloat64(fn.metrics.decisions.WithLabelValues(decisionForwarded)); int(got) != len(lat[1]) {
		b.Fatalf("%v of %d Routes forwarded", got, len(lat[1]))
	}
	reportQuantiles(b, lat[0], "local")
	reportQuantiles(b, lat[1], "forwarded")
}
