package radix

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestWorkerOf names the slots Match reports and no others.
func TestWorkerOf(t *testing.T) {
	ix := New(Config{})
	a, b := kv.WorkerRank{ID: "a"}, kv.WorkerRank{ID: "b", DPRank: 3}
	for _, w := range []kv.WorkerRank{a, b} {
		if err := ix.Store(w, 0, false, kv.TierDevice, []kv.Block{{EngineHash: 1, BlockHash: 10}}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[kv.WorkerRank]bool{}
	for _, s := range ix.Match([]uint64{10}, nil) {
		w, ok := ix.WorkerOf(s.Slot)
		if !ok {
			t.Fatalf("slot %d of a score names no worker", s.Slot)
		}
		got[w] = true
	}
	if len(got) != 2 || !got[a] || !got[b] {
		t.Fatalf("scored %v, want a/0 and b/3", got)
	}
	for _, slot := range []uint32{2, 1 << slotChunkBits, 1 << 31} {
		if w, ok := ix.WorkerOf(slot); ok {
			t.Fatalf("WorkerOf(%d) = %v, want none", slot, w)
		}
	}
}

// storeOne stores one block (engine hash eh, block hash bh) for w under the root.
func storeOne(t *testing.T, ix *Index, w kv.WorkerRank, eh, bh uint64) {
	t.Helper()
	if err := ix.Store(w, 0, false, kv.TierDevice, []kv.Block{{EngineHash: eh, BlockHash: bh}}); err != nil {
		t.Fatal(err)
	}
}

// TestSlotReuse: a removed worker's slot goes to a later worker only after
// SlotReuseDelay and once no Match that began before the removal is running;
// Match and WorkerOf then name the new worker, and Stats keeps the removed
// worker's counters.
func TestSlotReuse(t *testing.T) {
	ix := New(Config{CheckInvariants: true, SlotReuseDelay: time.Minute})
	now := time.Unix(1000, 0)
	ix.reg.now = func() time.Time { return now }
	a0, a1, b := kv.WorkerRank{ID: "a"}, kv.WorkerRank{ID: "a", DPRank: 1}, kv.WorkerRank{ID: "b"}
	storeOne(t, ix, a0, 1, 10)
	storeOne(t, ix, a1, 1, 10)
	storeOne(t, ix, b, 1, 10)
	slotA0 := ix.reg.get(a0).slot
	stores := ix.Stats().Stores

	ix.RemoveWorker("a")
	if _, ok := ix.WorkerOf(slotA0); ok || ix.Cached(a0) != 0 {
		t.Fatalf("removed rank still named or counted")
	}
	if st := ix.Stats(); st.Stores != stores || st.Residencies != 1 {
		t.Fatalf("after the removal: %+v (stores before %d)", st, stores)
	}
	c := kv.WorkerRank{ID: "c"}
	storeOne(t, ix, c, 2, 10)
	if got := ix.reg.get(c).slot; got != 3 {
		t.Fatalf("within the delay: c got slot %d, want a fresh slot 3", got)
	}

	// Past the delay, but a Match that began before the removal is running.
	now = now.Add(time.Minute)
	ix.reg.mu.Lock()
	for i := range ix.reg.free {
		ix.reg.free[i].epoch = ix.reg.epoch.Load() // (as if retired now)
	}
	ix.reg.mu.Unlock()
	inflight := ix.active[0:1]
	inflight[0].stamp.Store(ix.reg.epoch.Load()) // began in the epoch before the last retirement
	d := kv.WorkerRank{ID: "d"}
	storeOne(t, ix, d, 3, 10)
	if got := ix.reg.get(d).slot; got != 4 {
		t.Fatalf("with a Match in flight: d got slot %d, want a fresh slot 4", got)
	}
	inflight[0].stamp.Store(0)
	ix.overflow.Add(1) // a Match on an active set of its own
	e := kv.WorkerRank{ID: "e"}
	storeOne(t, ix, e, 4, 10)
	if got := ix.reg.get(e).slot; got != 5 {
		t.Fatalf("with an overflow Match in flight: e got slot %d, want a fresh slot 5", got)
	}
	ix.overflow.Add(-1)

	f := kv.WorkerRank{ID: "f"}
	storeOne(t, ix, f, 5, 10)
	if got := ix.reg.get(f).slot; got != slotA0 {
		t.Fatalf("quiescent: f got slot %d, want a's %d back", got, slotA0)
	}
	names := map[kv.WorkerRank]bool{}
	for _, s := range ix.Match([]uint64{10}, nil) {
		w, ok := ix.WorkerOf(s.Slot)
		if !ok || s.Cached != 1 {
			t.Fatalf("score %+v names %v, %v", s, w, ok)
		}
		names[w] = true
	}
	if len(names) != 5 || names[a0] || names[a1] || !names[f] {
		t.Fatalf("Match names %v", names)
	}
	ix.RemoveWorker("f")
	ix.RemoveWorker("b")
	ix.RemoveWorker("c")
	ix.RemoveWorker("d")
	ix.RemoveWorker("e")
	if st := ix.Stats(); st.Stores != stores+4 || st.Nodes != 0 || st.Residencies != 0 {
		t.Fatalf("after removing everyone: %+v", st)
	}
}

// TestSlotChurn: a fleet of 4 workers of 2 ranks each that re-registers
// 2,000 times keeps 8 slots, and RemoveWorker visits only the worker's own
// ranks (the registry lists them by id).
func TestSlotChurn(t *testing.T) {
	ix := New(Config{SlotReuseDelay: -1})
	for i := range 2000 {
		id := fmt.Sprintf("w%d", i)
		for rank := range 2 {
			storeOne(t, ix, kv.WorkerRank{ID: id, DPRank: uint32(rank)}, uint64(i)+1, uint64(i%7)+1)
		}
		if i >= 3 {
			ix.RemoveWorker(fmt.Sprintf("w%d", i-3))
		}
	}
	if ix.reg.n > 8 || len(ix.reg.byID) != 3 {
		t.Fatalf("%d slots made, %d workers listed", ix.reg.n, len(ix.reg.byID))
	}
	if err := ix.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestSlotReuseRacingMatches churns workers (register, store, remove) on four
// goroutines while four others match, under the race detector in CI. Group g's
// workers hold only prompt g (10 blocks) and a filler run of 20g stored first,
// so while a worker holds any of prompt g it counts 20g to 20g+10 blocks (a
// run's count is published after its last segment), and a Score of prompt g
// counting another group's size would be a reused slot read for its new owner. Without a delay only the epochs
// protect Match (its scores' Cached); with one, WorkerOf right after the
// Match must name a group-g worker or nobody (removed).
func TestSlotReuseRacingMatches(t *testing.T) {
	for _, delay := range []time.Duration{-1, 250 * time.Millisecond} {
		t.Run(fmt.Sprint(delay), func(t *testing.T) { slotReuseRacingMatches(t, delay) })
	}
}

func slotReuseRacingMatches(t *testing.T, delay time.Duration) {
	const groups = 4
	ix := New(Config{Shards: 4, SegmentBlocks: 4, SlotReuseDelay: delay})
	prompt := func(g int) []kv.Block {
		bs := make([]kv.Block, 10)
		for i := range bs {
			bs[i] = kv.Block{EngineHash: uint64(1000*g + i + 1), BlockHash: uint64(1000*g + i + 1)}
		}
		return bs
	}
	hashes := func(g int) []uint64 {
		var hs []uint64
		for _, b := range prompt(g) {
			hs = append(hs, b.BlockHash)
		}
		return hs
	}
	filler := func(g int) []kv.Block {
		bs := make([]kv.Block, 20*g)
		for i := range bs {
			bs[i] = kv.Block{EngineHash: uint64(500000 + i), BlockHash: uint64(500000 + i)}
		}
		return bs
	}
	deadline := time.Now().Add(time.Second)
	var regs atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 2*groups)
	for g := range groups {
		wg.Add(2)
		go func() { // churn
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				for rank := range 2 {
					w := kv.WorkerRank{ID: id, DPRank: uint32(rank)}
					if g > 0 {
						if err := ix.Store(w, 0, false, kv.TierDevice, filler(g)); err != nil {
							errc <- err
							return
						}
					}
					if err := ix.Store(w, 0, false, kv.TierDevice, prompt(g)); err != nil {
						errc <- err
						return
					}
				}
				ix.RemoveWorker(id)
				regs.Add(2)
			}
		}()
		go func() { // match
			defer wg.Done()
			var out []Score
			hs := hashes(g)
			prefix := fmt.Sprintf("g%d-", g)
			for time.Now().Before(deadline) {
				out = ix.Match(hs, out)
				for _, s := range out {
					if s.Cached != 0 && (s.Cached < uint64(20*g) || s.Cached > uint64(20*g+10)) {
						errc <- fmt.Errorf("prompt %d: slot %d counts %d blocks", g, s.Slot, s.Cached)
						return
					}
					if s.Matched == 0 || s.Matched > 10 {
						errc <- fmt.Errorf("prompt %d: slot %d matched %d", g, s.Slot, s.Matched)
						return
					}
					if delay > 0 {
						if w, ok := ix.WorkerOf(s.Slot); ok && !strings.HasPrefix(w.ID, prefix) {
							errc <- fmt.Errorf("prompt %d: slot %d names %s", g, s.Slot, w)
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if err := ix.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if st := ix.Stats(); st.Nodes != 0 || st.Residencies != 0 {
		t.Fatalf("after the churn: %+v", st)
	}
	t.Logf("delay %v: %d ranks registered, %d slots made", delay, regs.Load(), ix.reg.n)
	if delay < 0 && int64(ix.reg.n) > regs.Load()/2 {
		t.Errorf("%d slots made for %d ranks: slots are not reused", ix.reg.n, regs.Load())
	}
}
