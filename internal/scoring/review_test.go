package scoring

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// With max_candidates 1 the chosen worker must be the one candidate returned,
// also when temperature sampling chose a worker that is not the cheapest.
func TestRouteMaxCandidatesOneKeepsChosen(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true })
	toks := tokens(1, 8*bs)
	for i := range 4 {
		f.addWorker(fmt.Sprint("w", i), "m", 1)
		f.store(fmt.Sprint("w", i), 0, toks, 2*i, kv.TierDevice)
	}
	notCheapest := 0
	for range 200 {
		d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 50, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.WorkerID != "w3" {
			notCheapest++
		}
		if len(d.Candidates) != 1 || d.Candidates[0].WorkerID != d.WorkerID || d.Candidates[0].Cost != d.Cost {
			t.Fatalf("chose %s (cost %v) but candidates are %+v", d.WorkerID, d.Cost, d.Candidates)
		}
	}
	if notCheapest == 0 {
		t.Fatal("temperature 50 never sampled a worker other than the cheapest; the test checks nothing")
	}
}

// Predicted blocks count as device blocks: their credit is the device tier's
// weight, not a fixed 1.0.
func TestPredictedCreditUsesDeviceWeight(t *testing.T) {
	w := [kv.NumTiers]float64{0.5, 0.25, 0.1, 0}
	f := newFixture(t, func(c *Config) { c.TierWeights = &w })
	f.addWorker("a", "m", 1)
	toks := tokens(1, 8*bs)
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0); err != nil {
		t.Fatal(err)
	}
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Candidates[0]; c.Matched != 8 || c.PrefillBlocks != 8-8*0.5 {
		t.Fatalf("candidate %+v; want 8 predicted blocks credited at the device weight 0.5 (prefill 4)", c)
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
	f.r.overlay.predict(old, radix.PrefixKeys(hashesOf(toks), nil), f.clock.now())
	res, err := f.r.Score(&Prompt{Model: "m", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Scores[0]; s.Matched != 0 {
		t.Fatalf("b inherited a's late prediction: %+v", s)
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

func hashesOf(toks []uint32) []uint64 {
	return normalize.HashPrompt(normalize.Seed("", ""), toks, bs, nil, nil)
}

// Requests expire one by one as their TTLs end, oldest first, whatever was
// finished in between.
func TestRequestsExpireInOrder(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true; c.RequestTTL = time.Minute })
	f.addWorker("a", "m", 1)
	p := &Prompt{Model: "m", Tokens: tokens(1, 4*bs)}
	for _, id := range []string{"r1", "r2", "r3", "r4"} {
		if _, err := f.r.Route(p, id, 0, 0); err != nil {
			t.Fatal(err)
		}
		f.clock.advance(10 * time.Second)
	}
	if err := f.r.MarkFinished("r2"); err != nil {
		t.Fatal(err)
	}
	// Now r1 is 40s old. 25s later r1 (65s) has expired, r3 (45s) and r4 (35s) have not.
	f.clock.advance(25 * time.Second)
	if l := f.r.Loads()[0]; l.Active != 2 || l.PrefillBlocks != 8 {
		t.Fatalf("load = %+v; want r3 and r4 active (2 requests, 8 blocks)", l)
	}
	for id, want := range map[string]bool{"r1": false, "r3": true, "r4": true} {
		if err := f.r.MarkPrefillDone(id); (err == nil) != want {
			t.Errorf("MarkPrefillDone(%s) = %v; active %v", id, err, want)
		}
	}
	f.clock.advance(20 * time.Second) // r3 65s, r4 55s
	if l := f.r.Loads()[0]; l.Active != 1 || l.DecodeBlocks != 4 {
		t.Fatalf("load = %+v; want r4 alone in decode", l)
	}
	if err := f.r.checkInvariants(); err != nil {
		t.Fatal(err)
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
