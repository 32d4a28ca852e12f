package scoring

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

const bs = 16

// fakeClock is a settable clock for TTL tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

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
	// The tests' cost arithmetic is PolicyBlocks' in prefill blocks at
	// weight 1 (the default is 2; TestDefaultPrefillWeight checks it);
	// PolicyTime's tests set their policy.
	cfg := Config{Index: idx, BlockSize: bs, now: clock.now, Seed: 42, PrefillWeight: 1, Policy: PolicyBlocks}
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

func hashesOf(toks []uint32) []uint64 {
	return normalize.HashPrompt(normalize.Seed("", ""), toks, bs, nil, nil)
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
