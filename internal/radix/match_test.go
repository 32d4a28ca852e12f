package radix

import (
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestMatchZeroAllocs checks that Match allocates nothing when out has room.
func TestMatchZeroAllocs(t *testing.T) {
	ix := New(Config{})
	var workers []kv.WorkerRank
	for i := range 50 {
		workers = append(workers, kv.WorkerRank{ID: fmt.Sprintf("w%d", i)})
	}
	fillWorkers(t, ix, workers, 4)
	// Some workers drop a block in the middle so that the walk splits.
	for wi := 0; wi < 50; wi += 3 {
		if err := ix.Remove(workers[wi], []uint64{uint64(wi)<<40 | 9}, kv.TierDevice); err != nil {
			t.Fatal(err)
		}
	}
	prompt := append(blocksOfRun(0), blocksOfRun(2)...)
	out := make([]Score, 0, 64)
	out = ix.Match(prompt, out)
	if len(out) != 50 {
		t.Fatalf("got %d scores", len(out))
	}
	allocs := testing.AllocsPerRun(200, func() { out = ix.Match(prompt, out) })
	if allocs != 0 {
		t.Fatalf("Match allocated %.2f times per call", allocs)
	}
}

// TestMatchFirstSetTiers starts Match at a set kept as bitmaps whose holders
// have different best tiers: workers that hold the first block only on the
// host tier, some of them through the whole prompt and some leaving after the
// first block, each of which keeps its first tier to the end of its score.
func TestMatchFirstSetTiers(t *testing.T) {
	ix := New(Config{})
	m := newRefModel(ix.segmentStart)
	var all []kv.WorkerRank
	for wi := range 40 {
		w := kv.WorkerRank{ID: fmt.Sprintf("w%02d", wi)}
		all = append(all, w)
		ops := []randOp{{kind: "store", w: w, blocks: []kv.Block{{EngineHash: 1, BlockHash: 100}, {EngineHash: 2, BlockHash: 101}}}}
		switch {
		case wi < 10: // host only, both blocks
			ops = append(ops,
				randOp{kind: "storetier", w: w, tier: kv.TierHost, hashes: []uint64{1, 2}},
				randOp{kind: "remove", w: w, tier: kv.TierDevice, hashes: []uint64{1, 2}})
		case wi < 15: // host only, the first block
			ops = append(ops,
				randOp{kind: "storetier", w: w, tier: kv.TierHost, hashes: []uint64{1}},
				randOp{kind: "remove", w: w, tier: kv.TierDevice, hashes: []uint64{1, 2}})
		case wi < 20: // device and host (not a plain entry), the first block
			ops = append(ops,
				randOp{kind: "storetier", w: w, tier: kv.TierHost, hashes: []uint64{1}},
				randOp{kind: "remove", w: w, tier: kv.TierDevice, hashes: []uint64{2}})
		}
		for _, op := range ops {
			if err := applyBoth(ix, m, op); err != nil {
				t.Fatal(err)
			}
		}
	}
	sh := ix.shards[ix.rootShard(100)]
	id, _ := sh.lookup(rootID, pathKey(rootKey, 100))
	if fs := &sh.sets[sh.meta(id).set]; fs.bits.bm == nil || fs.bits.tiers != 1<<kv.TierDevice|1<<kv.TierHost || len(fs.e) != 5 {
		t.Fatalf("first set: bitmaps %v, tiers %b, %d entries not plain; want bitmaps of 2 tiers and 5", fs.bits.bm != nil, fs.bits.tiers, len(fs.e))
	}
	compareAll(t, ix, m, [][]uint64{{100}, {100, 101}, {100, 101, 102}}, all)
}
