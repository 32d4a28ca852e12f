package scoring

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

func TestApproximateWorkerCapacity(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ApproxCapacity = 10 })
	if err := f.r.AddWorker(Worker{ID: "x", Model: "m", Approximate: true}); err != nil {
		t.Fatal(err)
	}
	p1 := tokens(1, 8*bs)
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: p1}, "", 0, 0); err != nil {
		t.Fatal(err)
	}
	res, _ := f.r.Score(&Prompt{Model: "m", Tokens: p1})
	if res.Scores[0].Matched != 8 {
		t.Fatalf("approximate worker predicted %d of 8 blocks", res.Scores[0].Matched)
	}
	// 8 more blocks of another prompt push 6 of p1's out (capacity 10): its
	// last 6, so its first 2 still match.
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: tokens(9000, 8*bs)}, "", 0, 0); err != nil {
		t.Fatal(err)
	}
	res, _ = f.r.Score(&Prompt{Model: "m", Tokens: p1})
	if res.Scores[0].Matched != 2 {
		t.Fatalf("after eviction of p1's last 6 blocks matched = %d, want 2", res.Scores[0].Matched)
	}
	o := f.r.states["m"].overlay
	f.r.RemoveWorker("x")
	if _, err := f.r.Score(&Prompt{Model: "m", Tokens: p1}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("score after the model's last worker left: %v; want ErrNotFound", err)
	}
	if len(o.keys) != 0 {
		t.Fatalf("overlay holds %d keys after its only worker left", len(o.keys))
	}
}

// Capacity eviction drops an old prediction's last blocks first, so its
// leading blocks (the only ones a match can reach) survive.
func TestPredictionEvictionKeepsPrefix(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.PredictionCapacity = 6 })
	f.addWorker("a", "m", 1)
	p, q := tokens(1, 4*bs), tokens(5000, 4*bs)
	for _, toks := range [][]uint32{p, q} {
		if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	res, _ := f.r.Score(&Prompt{Model: "m", Tokens: p})
	if s := res.Scores[0]; s.Matched != 2 {
		t.Fatalf("p after q's 4 blocks pushed 2 of p's out of 6: matched %d, want 2 (its first two blocks)", s.Matched)
	}
}

// An approximate worker's overlay is LRU: routing a prompt again refreshes its
// blocks, so the least recently used prompt is the one evicted.
func TestApproximateOverlayIsLRU(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ApproxCapacity = 8 })
	if err := f.r.AddWorker(Worker{ID: "x", Model: "m", Approximate: true}); err != nil {
		t.Fatal(err)
	}
	p, q, r := tokens(1, 4*bs), tokens(5000, 4*bs), tokens(9000, 4*bs)
	route := func(toks []uint32) {
		t.Helper()
		f.clock.advance(time.Second)
		if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	check := func(stage string, want map[string]uint32, prompts map[string][]uint32) {
		t.Helper()
		for name, toks := range prompts {
			res, _ := f.r.Score(&Prompt{Model: "m", Tokens: toks})
			if got := res.Scores[0].Matched; got != want[name] {
				t.Errorf("%s: %s matched %d, want %d", stage, name, got, want[name])
			}
		}
	}
	all := map[string][]uint32{"p": p, "q": q, "r": r}
	for _, toks := range [][]uint32{p, q, p, p} {
		route(toks)
	}
	// 8 distinct blocks fit capacity 8, however often p was refreshed.
	check("after p q p p", map[string]uint32{"p": 4, "q": 4, "r": 0}, all)
	route(r)
	// r evicts the least recently used prompt, q.
	check("after r", map[string]uint32{"p": 4, "q": 0, "r": 4}, all)
}

// Two predictions of one key at the same instant must not let the older FIFO
// entry drop the newer prediction.
func TestPredictionRefreshAtSameInstant(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ApproxCapacity = 8 })
	if err := f.r.AddWorker(Worker{ID: "x", Model: "m", Approximate: true}); err != nil {
		t.Fatal(err)
	}
	p, q := tokens(1, 4*bs), tokens(5000, 4*bs)
	// The clock does not move: p, then p again (refresh), then q evicts p's
	// first entries, which are stale.
	for _, toks := range [][]uint32{p, p, q} {
		if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, toks := range [][]uint32{p, q} {
		res, _ := f.r.Score(&Prompt{Model: "m", Tokens: toks})
		if got := res.Scores[0].Matched; got != 4 {
			t.Errorf("matched %d, want 4 (8 live blocks fit capacity 8)", got)
		}
	}
}

// A prediction made for a rank that was removed (and whose overlay slot went
// to another worker) must not land on the new owner of the slot.
func TestPredictionForRemovedRankIsDropped(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 1)
	old := f.r.ranks[kv.WorkerRank{ID: "a"}]
	f.r.RemoveWorker("a")
	f.addWorker("b", "m", 1)
	if nb := f.r.ranks[kv.WorkerRank{ID: "b"}]; nb.slot != old.slot {
		t.Fatalf("b got overlay slot %d, not a's freed slot %d; the test needs the reuse", nb.slot, old.slot)
	}
	toks := tokens(1, 4*bs)
	old.model.overlay.predict(old, radix.PrefixKeys(hashesOf(toks), nil), f.clock.now())
	res, err := f.r.Score(&Prompt{Model: "m", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Scores[0]; s.Matched != 0 {
		t.Fatalf("b inherited a's late prediction: %+v", s)
	}
}

// A prediction ends once the engine's events confirm it: when the engine
// later evicts the blocks, the overlay does not keep claiming them.
func TestConfirmedPredictionEndsBeforeItsTTL(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	toks := tokens(1, 8*bs)
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The engine stores the first 6 blocks (confirming 6 of 8 predictions)...
	f.store(d.WorkerID, 0, toks, 6, kv.TierDevice)
	res, _ := f.r.Score(&Prompt{Model: "m", Tokens: toks})
	if s := scoreOf(t, res, d.WorkerID, 0); s.Matched != 8 || s.Predicted != 2 {
		t.Fatalf("after the store: %+v; want 8 matched, 2 of them predicted", s)
	}
	// ...then evicts blocks 3..5 (engine hashes 4..6).
	if err := f.index.Remove(kv.WorkerRank{ID: d.WorkerID}, []uint64{4, 5, 6}, kv.TierDevice); err != nil {
		t.Fatal(err)
	}
	res, _ = f.r.Score(&Prompt{Model: "m", Tokens: toks})
	if s := scoreOf(t, res, d.WorkerID, 0); s.Matched != 3 || s.Predicted != 0 {
		t.Fatalf("after the eviction: %+v; want the 3 blocks still in the index and no prediction over the evicted ones", s)
	}
}

// The overlay of one rank behaves as an LRU set of keys of its capacity,
// a prediction touching its keys last block first; checked against a plain
// model over random predictions that repeat keys often (stale FIFO entries,
// compaction).
func TestOverlayMatchesLRUModel(t *testing.T) {
	const capacity = 12
	o := newOverlay()
	rk := &rank{}
	o.addRank(rk, capacity, time.Hour)
	now := time.Unix(1_800_000_000, 0)
	var model []uint64 // least recently used first
	touch := func(k uint64) {
		for i, m := range model {
			if m == k {
				model = append(model[:i], model[i+1:]...)
				break
			}
		}
		model = append(model, k)
		if len(model) > capacity {
			model = model[1:]
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 3000 {
		chain := make([]uint64, 1+rng.IntN(6))
		base := uint64(rng.IntN(8)) * 100
		for i := range chain {
			chain[i] = base + uint64(i)
		}
		if step%7 == 0 { // same instant now and then
			now = now.Add(time.Nanosecond)
		}
		o.predict(rk, chain, now)
		for i := len(chain) - 1; i >= 0; i-- {
			touch(chain[i])
		}
		live := map[uint64]bool{}
		for k, hs := range o.keys {
			if len(hs) != 1 || hs[0].slot != rk.slot {
				t.Fatalf("step %d: key %d holders %+v", step, k, hs)
			}
			live[k] = true
		}
		if len(live) != len(model) {
			t.Fatalf("step %d: overlay holds %d keys, LRU model %d", step, len(live), len(model))
		}
		for _, k := range model {
			if !live[k] {
				t.Fatalf("step %d: key %d evicted, but the LRU model keeps it", step, k)
			}
		}
		if st := o.slots[rk.slot]; st.n > 2*capacity || st.n-st.stale > capacity {
			t.Fatalf("step %d: FIFO %d entries, %d stale", step, st.n, st.stale)
		}
	}
}
