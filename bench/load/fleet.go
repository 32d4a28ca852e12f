package load

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
)

// loadFleet is M engines with D data-parallel ranks each, every rank its own
// simulated engine on consecutive ports.
type loadFleet struct {
	workers [][]*engine.Engine // [worker][rank]
	bases   []int
}

func (f *loadFleet) close() {
	for _, w := range f.workers {
		for _, e := range w {
			e.Close()
		}
	}
}

func (f *loadFleet) each(fn func(w, r int, e *engine.Engine)) {
	for w, ranks := range f.workers {
		for r, e := range ranks {
			fn(w, r, e)
		}
	}
}

func startLoadFleet(m, d, capacity int, format engine.Format) (*loadFleet, error) {
	f := &loadFleet{}
	next := 20000 + rand.IntN(20000)
	for w := 0; w < m; w++ {
		var ranks []*engine.Engine
		for attempt := 0; ; attempt++ {
			if attempt > 200 {
				f.close()
				return nil, fmt.Errorf("no %d consecutive free ports for worker %d", d, w)
			}
			base := next
			next += d
			if next > 60000 {
				next = 20000
			}
			ranks = ranks[:0]
			ok := true
			for r := 0; r < d; r++ {
				e, err := engine.New(engine.Config{
					ID: fmt.Sprintf("load-%04d/%d", w, r), Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", base+r),
					DPRank: uint32(r), CapacityBlocks: capacity, Format: format,
					HashSeed: uint64(w*d+r)*0x9E3779B97F4A7C15 + 7,
				})
				if err != nil {
					ok = false
					break
				}
				ranks = append(ranks, e)
			}
			if ok {
				f.bases = append(f.bases, base)
				break
			}
			for _, e := range ranks {
				e.Close()
			}
		}
		f.workers = append(f.workers, ranks)
	}
	return f, nil
}

// register registers every worker with the router and waits until every
// rank's publisher has a subscriber.
func (f *loadFleet) register(ctx context.Context, reg kvrouterv1.RegistryClient, model string, dp int) error {
	for w, ranks := range f.workers {
		wk := &kvrouterv1.Worker{
			WorkerId: fmt.Sprintf("load-%04d", w), Model: model, Endpoint: fmt.Sprintf("sim://load-%04d", w),
			KvEventsEndpoint: ranks[0].Endpoint(), DpSize: uint32(dp), BlockSize: 16,
		}
		if _, err := reg.RegisterWorker(ctx, &kvrouterv1.RegisterWorkerRequest{Worker: wk}); err != nil {
			return fmt.Errorf("register %s: %w", wk.WorkerId, err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	var subErr error
	f.each(func(w, r int, e *engine.Engine) {
		for subErr == nil && !e.Publisher().Subscribed() {
			if time.Now().After(deadline) {
				subErr = fmt.Errorf("rank %s never subscribed", e.ID())
			}
			select {
			case <-ctx.Done():
				subErr = ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	return subErr
}

// fill serves random documents of pool on every rank until it holds fill
// blocks (or has tried ten times what that takes), on GOMAXPROCS goroutines,
// and returns the block stores published.
func (f *loadFleet) fill(pool docPool, fill int) (int64, error) {
	var (
		published atomic.Int64
		wg        sync.WaitGroup
		fillErr   atomic.Value
	)
	rankCh := make(chan *engine.Engine)
	for g := 0; g < runtime.GOMAXPROCS(0); g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			var toks []uint32
			for e := range rankCh {
				for i := 0; e.Stats().CachedNow < fill && i < 10*(fill/448+1); i++ {
					toks = pool.tokens(rng.IntN(pool.Docs), toks[:0])
					if _, err := e.ServeAndPublish(engine.Request{Tokens: toks}); err != nil {
						fillErr.CompareAndSwap(nil, err)
					}
				}
				published.Add(int64(e.Stats().StoredBlocks))
			}
		}(g)
	}
	f.each(func(_, _ int, e *engine.Engine) { rankCh <- e })
	close(rankCh)
	wg.Wait()
	if v := fillErr.Load(); v != nil {
		return 0, fmt.Errorf("fill: %w", v.(error))
	}
	return published.Load(), nil
}

// waitIndexed polls ListWorkers until the router holds every block the
// fleet caches, and returns how many entries over how many ranks.
func (f *loadFleet) waitIndexed(ctx context.Context, reg kvrouterv1.RegistryClient, model string, timeout time.Duration) (uint64, int, error) {
	var want uint64
	f.each(func(_, _ int, e *engine.Engine) { want += uint64(e.Stats().CachedNow) })
	deadline := time.Now().Add(timeout)
	for {
		resp, err := reg.ListWorkers(ctx, &kvrouterv1.ListWorkersRequest{Model: model})
		if err != nil {
			return 0, 0, fmt.Errorf("list workers: %w", err)
		}
		var have uint64
		for _, w := range resp.Workers {
			have += w.CachedBlocks
		}
		if have >= want {
			return have, len(resp.Workers), nil
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("router indexed %d of %d blocks within %v", have, want, timeout)
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// churn re-serves perSecond random documents on random ranks until ctx
// ends, to keep events flowing while Route is measured.
func (f *loadFleet) churn(ctx context.Context, pool docPool, perSecond float64) {
	var ranks []*engine.Engine
	f.each(func(_, _ int, e *engine.Engine) { ranks = append(ranks, e) })
	go func() {
		rng := rand.New(rand.NewPCG(7, 7))
		interval := time.Duration(float64(time.Second) / perSecond)
		t := time.NewTicker(interval)
		defer t.Stop()
		var toks []uint32
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			toks = pool.tokens(rng.IntN(pool.Docs), toks[:0])
			_, _ = ranks[rng.IntN(len(ranks))].ServeAndPublish(engine.Request{Tokens: toks})
		}
	}()
}
