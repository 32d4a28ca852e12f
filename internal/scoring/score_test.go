package scoring

import (
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
)

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
