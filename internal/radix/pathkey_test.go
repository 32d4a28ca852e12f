package radix

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestPrefixKeys checks that a prefix's key depends on the whole prefix and
// only on it.
func TestPrefixKeys(t *testing.T) {
	ab := PrefixKeys([]uint64{1, 2}, nil)
	a := PrefixKeys([]uint64{1}, nil)
	ba := PrefixKeys([]uint64{2, 1}, nil)
	if len(ab) != 2 || ab[0] != a[0] {
		t.Fatalf("keys of [1 2] = %x; the first must equal the key of [1] (%x)", ab, a)
	}
	if ab[1] == ba[1] || ab[0] == ab[1] || ba[0] == a[0] {
		t.Fatalf("keys do not tell prefixes apart: [1 2] %x, [2 1] %x", ab, ba)
	}
	ix := New(Config{})
	w := kv.WorkerRank{ID: "w"}
	if err := ix.Store(w, 0, false, kv.TierDevice, []kv.Block{{EngineHash: 7, BlockHash: 1}, {EngineHash: 8, BlockHash: 2}}); err != nil {
		t.Fatal(err)
	}
	sh := ix.shards[ix.rootShard(1)]
	if _, ok := sh.lookup(rootID, ab[0]); !ok {
		t.Fatal("the index does not key block 1's node by PrefixKeys([1])[0]")
	}
}
