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

// TestConcurrentStress floods the Router with Route, Score, Mark* and worker
// churn from several goroutines (run it with -race), then checks its tables
// agree and that finishing every request returns all load to zero.
func TestConcurrentStress(t *testing.T) {
	st := &stress{}
	st.r, st.prompts = newStressRouter(t)
	r := st.r

	const goroutines, iters = 6, 400
	var wg sync.WaitGroup
	errc := make(chan error, goroutines+1)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := st.client(uint64(g), iters); err != nil {
				errc <- err
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := st.churn(iters); err != nil {
			errc <- err
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if n := st.routed.Load(); n < iters/4 {
		t.Fatalf("only %d Routes succeeded; the flood is mostly Unavailable and checks little", n)
	}
	if err := r.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	for _, id := range st.open {
		if err := r.MarkFinished(id); err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	for _, l := range r.Loads() {
		if l != (Load{WorkerID: l.WorkerID, DPRank: l.DPRank, PrefillTokensPerSecond: l.PrefillTokensPerSecond}) {
			t.Errorf("load left after every request finished: %+v", l)
		}
	}
	if err := r.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// newStressRouter returns a Router with short TTLs and small capacities, so
// that expiry and eviction happen during the flood, four workers of two ranks
// that hold half of one of the first four prompts, and 12 prompts over 3
// shared prefixes.
func newStressRouter(t *testing.T) (*Router, [][]uint32) {
	t.Helper()
	var clock atomic.Int64 // nanoseconds; every reading moves it on a tenth of a millisecond
	base := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return base.Add(time.Duration(clock.Add(100_000))) }
	idx := radix.New(radix.Config{})
	r, err := New(Config{
		Index: idx, BlockSize: bs, now: now, Seed: 7,
		RequestTTL: 200 * time.Millisecond, PredictionTTL: 100 * time.Millisecond,
		PredictionCapacity: 24, ApproxCapacity: 16, approxTTL: time.Second,
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
	return r, prompts
}

// stress is what TestConcurrentStress's goroutines share.
type stress struct {
	r           *Router
	prompts     [][]uint32
	ids, routed atomic.Int64
	mu          sync.Mutex
	open        []string // request ids possibly still active
}

// client runs iters random operations: Route with a request id, Score, or
// MarkPrefillDone then, half the time, MarkFinished of a routed request.
func (st *stress) client(g uint64, iters int) error {
	r := st.r
	rng := rand.New(rand.NewPCG(g, 1))
	for range iters {
		p := &Prompt{Model: "m", Tokens: st.prompts[rng.IntN(len(st.prompts))]}
		switch op := rng.IntN(10); {
		case op < 6:
			id := fmt.Sprint("q", st.ids.Add(1))
			_, err := r.Route(p, id, float64(rng.IntN(2)), rng.IntN(3))
			if err != nil && !errors.Is(err, ErrResourceExhausted) {
				return fmt.Errorf("route: %w", err)
			}
			if err == nil {
				st.routed.Add(1)
				st.mu.Lock()
				st.open = append(st.open, id)
				st.mu.Unlock()
			}
		case op < 8:
			if _, err := r.Score(p); err != nil {
				return fmt.Errorf("score: %w", err)
			}
		default:
			st.mu.Lock()
			var id string
			if len(st.open) > 0 {
				k := rng.IntN(len(st.open))
				id = st.open[k]
				st.open[k] = st.open[len(st.open)-1]
				st.open = st.open[:len(st.open)-1]
			}
			st.mu.Unlock()
			if id == "" {
				continue
			}
			if err := r.MarkPrefillDone(id); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			if rng.IntN(2) == 0 {
				if err := r.MarkFinished(id); err != nil && !errors.Is(err, ErrNotFound) {
					return err
				}
			} else {
				st.mu.Lock()
				st.open = append(st.open, id)
				st.mu.Unlock()
			}
		}
	}
	return nil
}

// churn adds and removes workers, with and without events, checking the
// invariants now and then while the clients run.
func (st *stress) churn(iters int) error {
	r := st.r
	rng := rand.New(rand.NewPCG(99, 1))
	for i := range iters {
		id := fmt.Sprint("c", rng.IntN(3))
		if rng.IntN(2) == 0 {
			err := r.AddWorker(Worker{ID: id, Model: "m", DPSize: 1 + rng.IntN(2), Approximate: i%3 == 0})
			if err != nil && !errors.Is(err, ErrAlreadyExists) {
				return err
			}
		} else {
			r.RemoveWorker(id)
		}
		if i%50 == 0 {
			if err := r.checkInvariants(); err != nil {
				return fmt.Errorf("during the flood: %w", err)
			}
		}
	}
	return nil
}
