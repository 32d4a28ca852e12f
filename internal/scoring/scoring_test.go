package scoring

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

const bs = 16

// fakeClock is a settable clock for TTL tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

type fixture struct {
	t     *testing.T
	index *radix.Index
	r     *Router
	clock *fakeClock
}

func newFixture(t *testing.T, mod func(*Config)) *fixture {
	t.Helper()
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	idx := radix.New(radix.Config{CheckInvariants: true})
	// The tests' cost arithmetic is in prefill blocks at weight 1 (the
	// default is 2; TestDefaultPrefillWeight checks it).
	cfg := Config{Index: idx, BlockSize: bs, Now: clock.now, Seed: 42, PrefillWeight: 1}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, index: idx, r: r, clock: clock}
}

func (f *fixture) addWorker(id, model string, dp int) {
	f.t.Helper()
	if err := f.r.AddWorker(Worker{ID: id, Model: model, Endpoint: id + ":8000", DPSize: dp}); err != nil {
		f.t.Fatal(err)
	}
}

// tokens returns n deterministic tokens starting from base.
func tokens(base uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

// store tells the index that worker/rank holds the first nBlocks blocks of toks on tier.
func (f *fixture) store(id string, rank uint32, toks []uint32, nBlocks int, tier kv.Tier) {
	f.t.Helper()
	hashes := normalize.HashPrompt(normalize.Seed("", ""), toks, bs, nil, nil)
	blocks := make([]kv.Block, nBlocks)
	for i := range blocks {
		// Engine hashes are opaque and per worker: derive them from the position.
		blocks[i] = kv.Block{EngineHash: uint64(i + 1), BlockHash: hashes[i]}
	}
	if err := f.index.Store(kv.WorkerRank{ID: id, DPRank: rank}, 0, false, tier, blocks); err != nil {
		f.t.Fatal(err)
	}
}

func scoreOf(t *testing.T, res *ScoreResult, id string, rank uint32) WorkerScore {
	t.Helper()
	for _, s := range res.Scores {
		if s.WorkerID == id && s.DPRank == rank {
			return s
		}
	}
	t.Fatalf("no score for %s/%d in %+v", id, rank, res.Scores)
	return WorkerScore{}
}

func TestScoreOverlapPerWorkerAndModel(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 2)
	f.addWorker("other", "m2", 1)
	toks := tokens(100, 10*bs+7) // 10 full blocks and a partial tail
	f.store("a", 0, toks, 4, kv.TierDevice)
	f.store("b", 1, toks, 10, kv.TierHost)
	f.store("other", 0, toks, 10, kv.TierDevice)
	f.store("b", 0, tokens(90000, 3*bs), 3, kv.TierDevice) // blocks of another prompt

	res, err := f.r.Score(&Prompt{Model: "m", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if res.PromptBlocks != 10 || res.BlockSize != bs {
		t.Fatalf("prompt_blocks %d block_size %d; want 10 (tail not hashed), %d", res.PromptBlocks, res.BlockSize, bs)
	}
	if len(res.Scores) != 3 {
		t.Fatalf("got %d scores, want the 3 ranks of model m: %+v", len(res.Scores), res.Scores)
	}
	if s := res.Scores[0]; s.WorkerID != "b" || s.DPRank != 1 || s.Matched != 10 || s.ByTier[kv.TierHost] != 10 || s.ByTier[kv.TierDevice] != 0 {
		t.Errorf("first score = %+v; want b/1 with 10 host blocks", s)
	}
	if s := scoreOf(t, res, "a", 0); s.Matched != 4 || s.ByTier[kv.TierDevice] != 4 || s.Cached != 4 {
		t.Errorf("a/0 = %+v; want 4 matched on device, 4 cached", s)
	}
	if s := scoreOf(t, res, "b", 0); s.Matched != 0 || s.Cached != 3 {
		t.Errorf("b/0 = %+v; want 0 matched, 3 cached (its other prompt)", s)
	}

	// block_hashes computed by the client give the same answer.
	hashes := normalize.HashPrompt(normalize.Seed("", ""), toks, bs, nil, nil)
	res2, err := f.r.Score(&Prompt{Model: "m", BlockHashes: hashes})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res2.Scores) != fmt.Sprint(res.Scores) {
		t.Errorf("block_hashes score %+v differs from token score %+v", res2.Scores, res.Scores)
	}

	// A LoRA or a cache salt changes the hashes: nothing matches.
	res3, err := f.r.Score(&Prompt{Model: "m", Tokens: toks, CacheSalt: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res3.Scores {
		if s.Matched != 0 {
			t.Errorf("salted prompt matched %+v", s)
		}
	}
}

// TestDefaultPrefillWeight checks that a zero PrefillWeight means 2.
func TestDefaultPrefillWeight(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true; c.PrefillWeight = 0 })
	f.addWorker("a", "m", 1)
	toks := tokens(7, 8*bs)
	f.store("a", 0, toks, 3, kv.TierDevice)
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Cost != 2*(8-3) || d.Candidates[0].PrefillBlocks != 5 {
		t.Fatalf("decision %+v; want cost 2 x 5 prefill blocks = 10", d)
	}
}

func TestRouteCostTerms(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true })
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	toks := tokens(7, 8*bs)
	f.store("a", 0, toks, 4, kv.TierHost)   // credit 4*0.75 = 3
	f.store("b", 0, toks, 2, kv.TierDevice) // credit 2
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.WorkerID != "a" || d.Matched != 4 || d.PromptBlocks != 8 || d.Cost != 5 || d.Endpoint != "a:8000" {
		t.Fatalf("decision %+v; want a with matched 4 and cost 8-3 = 5", d)
	}
	want := map[string]Candidate{
		"a": {WorkerID: "a", Matched: 4, PrefillBlocks: 5, Cost: 5},
		"b": {WorkerID: "b", Matched: 2, PrefillBlocks: 6, Cost: 6},
	}
	for _, c := range d.Candidates {
		if c != want[c.WorkerID] {
			t.Errorf("candidate %+v; want %+v", c, want[c.WorkerID])
		}
	}
}

func TestRouteLoadAccountingAndTTL(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true; c.RequestTTL = time.Minute })
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	toks := tokens(1, 10*bs)
	f.store("a", 0, toks, 6, kv.TierDevice)

	// a: cost 4; b: cost 10. r1 goes to a and adds its 4 uncached blocks as prefill.
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "r1", 0, 0)
	if err != nil || d.WorkerID != "a" {
		t.Fatalf("r1 -> %+v, %v; want a", d, err)
	}
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "r1", 0, 0); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("duplicate request_id: %v; want ErrAlreadyExists", err)
	}
	load := func(id string) Load {
		for _, l := range f.r.Loads() {
			if l.WorkerID == id {
				return l
			}
		}
		return Load{}
	}
	if l := load("a"); l.Active != 1 || l.PrefillBlocks != 4 || l.PrefillTokens != 4*bs || l.DecodeBlocks != 0 {
		t.Fatalf("a load after route = %+v; want 1 active, 4 prefill blocks, 64 tokens", l)
	}
	if err := f.r.MarkPrefillDone("r1"); err != nil {
		t.Fatal(err)
	}
	if l := load("a"); l.PrefillBlocks != 0 || l.DecodeBlocks != 10 {
		t.Fatalf("a load after prefill = %+v; want decode 10", l)
	}
	// Now a costs 4 + 10 decode = 14 > b's 10: the next request goes to b.
	d, err = f.r.Route(&Prompt{Model: "m", Tokens: toks}, "r2", 0, 0)
	if err != nil || d.WorkerID != "b" {
		t.Fatalf("r2 -> %+v, %v; want b (a is loaded)", d, err)
	}
	if err := f.r.MarkFinished("r1"); err != nil {
		t.Fatal(err)
	}
	if l := load("a"); l != (Load{WorkerID: "a"}) {
		t.Fatalf("a load after finish = %+v; want zero", l)
	}
	if err := f.r.MarkFinished("r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("finish twice: %v; want ErrNotFound", err)
	}
	if err := f.r.MarkPrefillDone("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown request: %v; want ErrNotFound", err)
	}
	// r2 is never finished: it expires after the TTL.
	f.clock.advance(2 * time.Minute)
	if l := load("b"); l.Active != 0 || l.PrefillBlocks != 0 {
		t.Fatalf("b load after TTL = %+v; want released", l)
	}
	if err := f.r.MarkFinished("r2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired request: %v; want ErrNotFound", err)
	}
}

func TestRouteBusyThresholds(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxActivePrefillTokens = 100; c.DisablePrediction = true })
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	toks := tokens(1, 8*bs) // 128 uncached tokens: one request puts a worker over 100
	seen := map[string]bool{}
	for i := range 2 {
		d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, fmt.Sprint("r", i), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		seen[d.WorkerID] = true
		if len(d.Candidates) != 2-i {
			t.Errorf("route %d had %d candidates, want %d", i, len(d.Candidates), 2-i)
		}
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("two requests went to %v; want one each", seen)
	}
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "r3", 0, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("all busy: %v; want ErrUnavailable", err)
	}
}

func TestRouteTemperature(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true })
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	toks := tokens(1, 8*bs)
	f.store("a", 0, toks, 8, kv.TierDevice)
	counts := map[string]int{}
	for range 2000 {
		d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 1.0, 0)
		if err != nil {
			t.Fatal(err)
		}
		counts[d.WorkerID]++
	}
	// Normalized costs 0 and 1: P(a) = 1/(1+e^-1) ~ 0.73.
	if pa := float64(counts["a"]) / 2000; pa < 0.66 || pa > 0.80 {
		t.Fatalf("P(a) = %.3f at temperature 1; want about 0.73 (%v)", pa, counts)
	}
	counts = map[string]int{}
	for range 200 {
		d, _ := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
		counts[d.WorkerID]++
	}
	if counts["a"] != 200 {
		t.Fatalf("temperature 0 chose %v; want always a", counts)
	}
	// Ties are broken at random.
	f.addWorker("c", "m", 1)
	f.store("c", 0, toks, 8, kv.TierDevice)
	counts = map[string]int{}
	for range 200 {
		d, _ := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
		counts[d.WorkerID]++
	}
	if counts["a"] < 50 || counts["c"] < 50 || counts["b"] != 0 {
		t.Fatalf("tie between a and c chose %v; want both often, never b", counts)
	}
}

func TestPredictionGroupsBurst(t *testing.T) {
	for _, predict := range []bool{true, false} {
		t.Run(fmt.Sprint("predict=", predict), func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.DisablePrediction = !predict; c.PredictionTTL = time.Minute })
			for i := range 8 {
				f.addWorker(fmt.Sprint("w", i), "m", 1)
			}
			toks := tokens(500, 32*bs)
			first, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			same := 0
			for range 20 {
				d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if d.WorkerID == first.WorkerID {
					same++
					if predict && d.Matched != 32 {
						t.Errorf("predicted match %d, want 32", d.Matched)
					}
				}
			}
			if predict && same != 20 {
				t.Fatalf("with prediction %d of 20 followers went to %s; want all", same, first.WorkerID)
			}
			if !predict && same == 20 {
				t.Fatalf("without prediction every follower tied onto %s; ties should scatter", first.WorkerID)
			}
			if predict {
				res, _ := f.r.Score(&Prompt{Model: "m", Tokens: toks})
				if s := res.Scores[0]; s.WorkerID != first.WorkerID || s.Predicted != 32 || s.ByTier[kv.TierDevice] != 32 || s.Cached != 0 {
					t.Fatalf("score after prediction = %+v", s)
				}
				f.clock.advance(2 * time.Minute)
				res, _ = f.r.Score(&Prompt{Model: "m", Tokens: toks})
				if s := res.Scores[0]; s.Matched != 0 {
					t.Fatalf("prediction outlived its TTL: %+v", s)
				}
			}
		})
	}
}

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
	f.r.RemoveWorker("x")
	if _, err := f.r.Score(&Prompt{Model: "m", Tokens: p1}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("score after the model's last worker left: %v; want ErrNotFound", err)
	}
	if len(f.r.overlay.keys) != 0 {
		t.Fatalf("overlay holds %d keys after its only worker left", len(f.r.overlay.keys))
	}
}

func TestPromptErrors(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxPromptTokens = 64 })
	f.addWorker("a", "m", 1)
	for _, tc := range []struct {
		name string
		p    Prompt
		want error
		text string
	}{
		{"empty", Prompt{Model: "m"}, ErrInvalidArgument, "empty"},
		{"both", Prompt{Model: "m", Tokens: tokens(1, 16), BlockHashes: []uint64{1}}, ErrInvalidArgument, "both"},
		{"too long", Prompt{Model: "m", Tokens: tokens(1, 65)}, ErrInvalidArgument, "max-prompt-tokens"},
		{"too many hashes", Prompt{Model: "m", BlockHashes: make([]uint64, 5)}, ErrInvalidArgument, "block_hashes"},
		{"no model", Prompt{Tokens: tokens(1, 16)}, ErrInvalidArgument, "model"},
		{"mm empty hash", Prompt{Model: "m", Tokens: tokens(1, 32), MM: []MMItem{{Length: 4}}}, ErrInvalidArgument, "mm_items[0].hash"},
		{"mm out of range", Prompt{Model: "m", Tokens: tokens(1, 32), MM: []MMItem{{Hash: "img", Offset: 30, Length: 4}}}, ErrInvalidArgument, "mm_items[0]"},
		{"mm with hashes", Prompt{Model: "m", BlockHashes: []uint64{1}, MM: []MMItem{{Hash: "img", Length: 1}}}, ErrInvalidArgument, "mm_items"},
		{"unknown model", Prompt{Model: "nope", Tokens: tokens(1, 16)}, ErrNotFound, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.r.Route(&tc.p, "", 0, 0)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Route: %v; want %v mentioning %q", err, tc.want, tc.text)
			}
			if _, err := f.r.Score(&tc.p); !errors.Is(err, tc.want) {
				t.Fatalf("Score: %v; want %v", err, tc.want)
			}
		})
	}
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: tokens(1, 16)}, "", -1, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("negative temperature: %v", err)
	}
}

func TestMultimodalItemsChangeHashes(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 1)
	toks := tokens(1, 4*bs)
	f.store("a", 0, toks, 4, kv.TierDevice)
	res, err := f.r.Score(&Prompt{Model: "m", Tokens: toks, MM: []MMItem{{Hash: "image-1", Offset: 2 * bs, Length: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Scores[0].Matched; m != 2 {
		t.Fatalf("matched %d; want 2 (the image in block 2 changes its hash)", m)
	}
}

func TestRemoveWorkerReleasesLoad(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 2)
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: tokens(1, 32)}, "r1", 0, 0); err != nil {
		t.Fatal(err)
	}
	f.r.RemoveWorker("a")
	if err := f.r.MarkFinished("r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("request of a removed worker: %v; want ErrNotFound", err)
	}
	if len(f.r.Loads()) != 0 {
		t.Fatalf("loads after removal: %v", f.r.Loads())
	}
	if err := f.r.AddWorker(Worker{ID: "a", Model: "m"}); err != nil {
		t.Fatalf("re-adding a removed worker: %v", err)
	}
}

func TestRouteMaxCandidates(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DisablePrediction = true })
	toks := tokens(1, 8*bs)
	for i := range 6 {
		f.addWorker(fmt.Sprint("w", i), "m", 1)
		f.store(fmt.Sprint("w", i), 0, toks, i, kv.TierDevice) // w5 holds the most
	}
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Candidates) != 3 || d.Candidates[0].WorkerID != "w5" || d.Candidates[1].WorkerID != "w4" || d.Candidates[2].WorkerID != "w3" {
		t.Fatalf("candidates %+v; want w5 (chosen), w4, w3", d.Candidates)
	}
}

func TestSlotCacheFollowsReRegistration(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 1)
	toks := tokens(1, 4*bs)
	f.store("a", 0, toks, 4, kv.TierDevice)
	for range 2 { // the first Score learns a's slot, the second uses it
		res, err := f.r.Score(&Prompt{Model: "m", Tokens: toks})
		if err != nil || res.Scores[0].Matched != 4 {
			t.Fatalf("score = %+v, %v", res, err)
		}
	}
	// a moves to another model: the cached slot must not keep it in model m.
	f.r.RemoveWorker("a")
	f.addWorker("a", "m2", 1)
	f.addWorker("b", "m", 1)
	res, err := f.r.Score(&Prompt{Model: "m", Tokens: toks})
	if err != nil || len(res.Scores) != 1 || res.Scores[0].WorkerID != "b" || res.Scores[0].Matched != 0 {
		t.Fatalf("model m after a left = %+v, %v; want only b with 0", res, err)
	}
	res, err = f.r.Score(&Prompt{Model: "m2", Tokens: toks})
	if err != nil || res.Scores[0].WorkerID != "a" || res.Scores[0].Matched != 4 {
		t.Fatalf("model m2 = %+v, %v; want a with 4", res, err)
	}
}

func TestPredictionMaxBlocks(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.PredictionMaxBlocks = 5; c.PredictionTTL = time.Minute })
	f.addWorker("a", "m", 1)
	toks := tokens(1, 20*bs)
	f.store("a", 0, toks, 3, kv.TierDevice)
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0); err != nil {
		t.Fatal(err)
	}
	res, err := f.r.Score(&Prompt{Model: "m", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	// 3 blocks from the index, then 5 predicted past them, of 20.
	if s := res.Scores[0]; s.Matched != 8 || s.Predicted != 5 {
		t.Fatalf("score after route = %+v; want 8 matched, 5 predicted (cap 5 past the 3 held)", s)
	}
}
