package scoring

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// checkInvariants stops the Router and checks its tables agree: registry,
// model lists, load counters against active requests, the overlay's holders
// against its FIFOs, and the slot cache.
func (r *Router) checkInvariants() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.load.mu.Lock()
	defer r.load.mu.Unlock()
	o := r.overlay
	o.mu.Lock()
	defer o.mu.Unlock()

	registered := func(rk *rank) bool { return r.ranks[rk.key] == rk }
	nRanks := 0
	for id, wk := range r.workers {
		if wk.ID != id || len(wk.ranks) != wk.DPSize {
			return fmt.Errorf("worker %q: id %q, %d ranks for dp %d", id, wk.ID, len(wk.ranks), wk.DPSize)
		}
		for _, rk := range wk.ranks {
			if !registered(rk) || rk.worker != wk {
				return fmt.Errorf("rank %v of %q not in the rank table", rk.key, id)
			}
			if ms := r.models[wk.Model]; rk.idx >= len(ms) || ms[rk.idx] != rk {
				return fmt.Errorf("rank %v: idx %d does not index model %q's list", rk.key, rk.idx, wk.Model)
			}
			if st := o.slots[rk.slot]; st == nil || st.rank != rk {
				return fmt.Errorf("rank %v: overlay slot %d belongs to another rank", rk.key, rk.slot)
			}
		}
		nRanks += len(wk.ranks)
	}
	if nRanks != len(r.ranks) {
		return fmt.Errorf("%d ranks in workers, %d in the rank table", nRanks, len(r.ranks))
	}
	inModels := 0
	for _, ms := range r.models {
		inModels += len(ms)
	}
	if inModels != nRanks {
		return fmt.Errorf("%d ranks in model lists, %d registered", inModels, nRanks)
	}

	listed := 0
	for q, prev := r.load.head, (*request)(nil); q != nil; prev, q = q, q.next {
		if q.prev != prev || r.load.requests[q.id] != q {
			return fmt.Errorf("request list broken at %q", q.id)
		}
		if q.next == nil && r.load.tail != q {
			return fmt.Errorf("request list tail is not its last request %q", q.id)
		}
		listed++
	}
	if listed != len(r.load.requests) {
		return fmt.Errorf("%d requests listed, %d active", listed, len(r.load.requests))
	}
	type sums struct{ active, prefill, tokens, decode int64 }
	want := map[*rank]*sums{}
	for id, q := range r.load.requests {
		if !registered(q.rank) {
			return fmt.Errorf("request %q is active on unregistered rank %v", id, q.rank.key)
		}
		s := want[q.rank]
		if s == nil {
			s = &sums{}
			want[q.rank] = s
		}
		s.active++
		if q.prefillDone {
			s.decode += q.decodeBlocks
		} else {
			s.prefill += q.prefillBlocks
			s.tokens += q.prefillTokens
		}
	}
	for _, rk := range r.ranks {
		s := want[rk]
		if s == nil {
			s = &sums{}
		}
		if got := (sums{rk.active, rk.prefillBlocks, rk.prefillTokens, rk.decodeBlocks}); got != *s {
			return fmt.Errorf("rank %v load %+v, requests sum to %+v", rk.key, got, *s)
		}
	}

	entries := map[[2]uint64]int{} // (slot, key) -> current FIFO entries
	for slot, st := range o.slots {
		if st == nil {
			continue
		}
		if !registered(st.rank) || st.rank.slot != int32(slot) {
			return fmt.Errorf("overlay slot %d held by unregistered rank %v", slot, st.rank.key)
		}
		stale := 0
		last := int64(0)
		for i := 0; i < st.n; i++ {
			e := st.fifo[(st.head+i)%len(st.fifo)]
			if e.expires <= last {
				return fmt.Errorf("slot %d: FIFO expiries not increasing at %d", slot, i)
			}
			last = e.expires
			if o.isCurrent(e, int32(slot)) {
				entries[[2]uint64{uint64(slot), e.key}]++
			} else {
				stale++
			}
		}
		if stale != st.stale {
			return fmt.Errorf("slot %d: %d stale FIFO entries, counted %d", slot, stale, st.stale)
		}
		if live := st.n - st.stale; live > st.capacity || st.n > 2*st.capacity {
			return fmt.Errorf("slot %d: %d live of %d entries over capacity %d", slot, live, st.n, st.capacity)
		}
	}
	for key, hs := range o.keys {
		if len(hs) == 0 {
			return fmt.Errorf("key %x has an empty holder list", key)
		}
		for _, h := range hs {
			if st := o.slots[h.slot]; st == nil {
				return fmt.Errorf("key %x held by freed slot %d", key, h.slot)
			}
			if n := entries[[2]uint64{uint64(h.slot), key}]; n != 1 {
				return fmt.Errorf("key %x on slot %d has %d current FIFO entries, want 1", key, h.slot, n)
			}
		}
	}
	for slot, rk := range r.bySlot {
		if rk != nil && !registered(rk) {
			return fmt.Errorf("slot cache %d names unregistered rank %v", slot, rk.key)
		}
	}
	return nil
}

// TestConcurrentStress floods the Router with Route, Score, Mark* and worker
// churn from several goroutines (run it with -race), then checks its tables
// agree and that finishing every request returns all load to zero.
func TestConcurrentStress(t *testing.T) {
	var clock atomic.Int64 // nanoseconds; every reading moves it on 100µs
	base := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return base.Add(time.Duration(clock.Add(100_000))) }
	idx := radix.New(radix.Config{})
	r, err := New(Config{
		Index: idx, BlockSize: bs, Now: now, Seed: 7,
		RequestTTL: 200 * time.Millisecond, PredictionTTL: 100 * time.Millisecond,
		PredictionCapacity: 24, ApproxCapacity: 16, ApproxTTL: time.Second,
		MaxActivePrefillTokens: 40 * bs,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := r.AddWorker(Worker{ID: fmt.Sprint("s", i), Model: "m", DPSize: 2}); err != nil {
			t.Fatal(err)
		}
	}
	prompts := make([][]uint32, 12)
	for i := range prompts {
		prompts[i] = tokens(uint32(i%3)*100_000+uint32(i)*1000, (4+i)*bs) // 3 shared prefixes
	}
	for i := range 4 {
		hs := hashesOf(prompts[i])
		blocks := make([]kv.Block, len(hs)/2)
		for j := range blocks {
			blocks[j] = kv.Block{EngineHash: uint64(j + 1), BlockHash: hs[j]}
		}
		if err := idx.Store(kv.WorkerRank{ID: fmt.Sprint("s", i)}, 0, false, kv.TierDevice, blocks); err != nil {
			t.Fatal(err)
		}
	}

	const goroutines, iters = 6, 400
	var ids, routed atomic.Int64
	var mu sync.Mutex
	var open []string // request ids possibly still active
	var wg sync.WaitGroup
	errc := make(chan error, goroutines+1)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range iters {
				p := &Prompt{Model: "m", Tokens: prompts[rng.IntN(len(prompts))]}
				switch op := rng.IntN(10); {
				case op < 6:
					id := fmt.Sprint("q", ids.Add(1))
					_, err := r.Route(p, id, float64(rng.IntN(2)), rng.IntN(3))
					if err != nil && !errors.Is(err, ErrUnavailable) {
						errc <- fmt.Errorf("route: %w", err)
						return
					}
					if err == nil {
						routed.Add(1)
						mu.Lock()
						open = append(open, id)
						mu.Unlock()
					}
				case op < 8:
					if _, err := r.Score(p); err != nil {
						errc <- fmt.Errorf("score: %w", err)
						return
					}
				default:
					mu.Lock()
					var id string
					if len(open) > 0 {
						k := rng.IntN(len(open))
						id = open[k]
						open[k] = open[len(open)-1]
						open = open[:len(open)-1]
					}
					mu.Unlock()
					if id == "" {
						continue
					}
					if err := r.MarkPrefillDone(id); err != nil && !errors.Is(err, ErrNotFound) {
						errc <- err
						return
					}
					if rng.IntN(2) == 0 {
						if err := r.MarkFinished(id); err != nil && !errors.Is(err, ErrNotFound) {
							errc <- err
							return
						}
					} else {
						mu.Lock()
						open = append(open, id)
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // churn: workers with and without events come and go
		defer wg.Done()
		rng := rand.New(rand.NewPCG(99, 1))
		for i := range iters {
			id := fmt.Sprint("c", rng.IntN(3))
			if rng.IntN(2) == 0 {
				err := r.AddWorker(Worker{ID: id, Model: "m", DPSize: 1 + rng.IntN(2), Approximate: i%3 == 0})
				if err != nil && !errors.Is(err, ErrAlreadyExists) {
					errc <- err
					return
				}
			} else {
				r.RemoveWorker(id)
			}
			if i%50 == 0 {
				if err := r.checkInvariants(); err != nil {
					errc <- fmt.Errorf("during the flood: %w", err)
					return
				}
			}
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if n := routed.Load(); n < iters/4 {
		t.Fatalf("only %d Routes succeeded; the flood is mostly Unavailable and checks little", n)
	}
	if err := r.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	for _, id := range open {
		if err := r.MarkFinished(id); err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	for _, l := range r.Loads() {
		if l != (Load{WorkerID: l.WorkerID, DPRank: l.DPRank}) {
			t.Errorf("load left after every request finished: %+v", l)
		}
	}
	if err := r.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}
