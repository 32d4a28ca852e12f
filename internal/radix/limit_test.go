package radix

import (
	"errors"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestHolderCountLimit: a node counts at most maxHolderCount engine hashes of
// one worker per tier. A 256th is skipped and counted invalid: a saturated
// count would let removing the first 255 free a node the 256th is still bound
// to (and a later remove index a freed shard).
func TestHolderCountLimit(t *testing.T) {
	ix := New(Config{CheckInvariants: true}) // invariants checked after every call
	w := kv.WorkerRank{ID: "w"}
	for eh := uint64(1); eh <= maxHolderCount; eh++ {
		if err := ix.Store(w, 0, false, kv.TierHost, []kv.Block{{EngineHash: eh, BlockHash: 42}}); err != nil {
			t.Fatalf("store %d: %v", eh, err)
		}
	}
	// One more on the same tier, in a run whose other block is fine.
	err := ix.Store(w, 0, false, kv.TierHost, []kv.Block{{EngineHash: 300, BlockHash: 42}, {EngineHash: 301, BlockHash: 43}})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("256th engine hash on one prefix and tier: %v; want ErrInvalid", err)
	}
	// The skipped block's child was still applied under the prefix.
	if got := ix.Match([]uint64{42, 43}, nil); len(got) != 1 || got[0].Matched != 2 {
		t.Fatalf("match after a partly skipped run: %+v", got)
	}
	// Another tier has its own count; a tier copy past the limit is skipped too.
	if err := ix.Store(w, 0, false, kv.TierDevice, []kv.Block{{EngineHash: 400, BlockHash: 42}}); err != nil {
		t.Fatal(err)
	}
	if err := ix.StoreTier(w, []uint64{400}, kv.TierHost); !errors.Is(err, ErrInvalid) {
		t.Fatalf("tier copy past the limit: %v; want ErrInvalid", err)
	}
	st := ix.Stats()
	if st.Invalid != 2 || st.Residencies != maxHolderCount+2 {
		t.Fatalf("stats %+v; want 2 invalid, %d residencies", st, maxHolderCount+2)
	}
	// Removing every host copy leaves the device binding (and its node) intact.
	var all []uint64
	for eh := uint64(1); eh <= maxHolderCount; eh++ {
		all = append(all, eh)
	}
	if err := ix.Remove(w, all, kv.TierHost); err != nil {
		t.Fatal(err)
	}
	if err := ix.Remove(w, []uint64{300}, kv.TierHost); !errors.Is(err, ErrBlockNotFound) {
		t.Fatalf("remove of the skipped hash: %v; want ErrBlockNotFound", err)
	}
	if got := ix.Match([]uint64{42}, nil); len(got) != 1 || got[0].ByTier[kv.TierDevice] != 1 {
		t.Fatalf("match after removing the host copies: %+v", got)
	}
	if err := ix.Remove(w, []uint64{400}, kv.TierDevice); err != nil {
		t.Fatal(err)
	}
	if err := ix.Remove(w, []uint64{301}, kv.TierHost); err != nil {
		t.Fatal(err)
	}
	if st := ix.Stats(); st.Nodes != 0 || st.Residencies != 0 {
		t.Fatalf("after removing everything: %+v", st)
	}
}
