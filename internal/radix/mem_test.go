package radix

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestMemoryReturnsToBaseline stores about 200k residencies, removes them in a
// random order (not the reverse of the stores, so nodes with children go
// before their children), and checks that nodes, residencies and the heap come
// back to where they were.
func TestMemoryReturnsToBaseline(t *testing.T) {
	ix := New(Config{})
	var workers []kv.WorkerRank
	for i := range 16 {
		workers = append(workers, kv.WorkerRank{ID: fmt.Sprintf("w%d", i)})
	}
	// Register the workers first: a worker's registry entry stays for good.
	for _, w := range workers {
		if err := ix.Store(w, 0, false, kv.TierDevice, []kv.Block{{EngineHash: 1, BlockHash: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := ix.Remove(w, []uint64{1}, kv.TierDevice); err != nil {
			t.Fatal(err)
		}
	}
	base := heapAlloc()
	for round := range 2 {
		hashes := fillWorkers(t, ix, workers, 800)
		st := ix.Stats()
		if st.Residencies != 16*800*16 || st.Nodes == 0 {
			t.Fatalf("after stores: %+v", st)
		}
		full := heapAlloc()
		r := rand.New(rand.NewPCG(uint64(round), 1))
		for wi, w := range workers {
			hs := hashes[wi]
			r.Shuffle(len(hs), func(i, j int) { hs[i], hs[j] = hs[j], hs[i] })
			for i := 0; i < len(hs); i += 7 {
				if err := ix.Remove(w, hs[i:min(i+7, len(hs))], kv.TierDevice); err != nil {
					t.Fatal(err)
				}
			}
		}
		if st := ix.Stats(); st.Nodes != 0 || st.Residencies != 0 {
			t.Fatalf("after removes: %+v", st)
		}
		if err := ix.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		end := heapAlloc()
		grown := int64(full) - int64(base)
		left := int64(end) - int64(base)
		t.Logf("round %d: heap base %d, full +%d, after removes %+d bytes", round, base, grown, left)
		if grown < 4<<20 {
			t.Fatalf("heap grew only %d bytes for 204800 residencies: measurement broken?", grown)
		}
		if left > 512<<10 {
			t.Fatalf("heap after removing everything is %d bytes above baseline (grew %d)", left, grown)
		}
	}
	runtime.KeepAlive(ix)
}

// TestMemoryShrinksAfterPartialRemove checks that maps rebuilt after most of
// their entries go give memory back while the rest stays intact.
func TestMemoryShrinksAfterPartialRemove(t *testing.T) {
	ix := New(Config{Shards: 1})
	workers := []kv.WorkerRank{{ID: "a"}, {ID: "b"}}
	base := heapAlloc()
	hashes := fillWorkers(t, ix, workers, 1500)
	full := heapAlloc()
	for wi, w := range workers {
		hs := hashes[wi]
		// Keep the first run of each worker; drop the rest leaf-first.
		for i := len(hs) - 1; i >= 16; i-- {
			if err := ix.Remove(w, hs[i:i+1], kv.TierDevice); err != nil {
				t.Fatal(err)
			}
		}
	}
	end := heapAlloc()
	if err := ix.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	got := ix.Match(blocksOfRun(0), nil)
	if len(got) != 2 || got[0].Matched != 16 || got[1].Matched != 16 {
		t.Fatalf("kept run: %+v", got)
	}
	t.Logf("heap base %d, full +%d, after removing 99%% %+d", base, int64(full)-int64(base), int64(end)-int64(base))
	// The node arena keeps its peak size (ids are not renumbered); the maps must shrink.
	if int64(end)-int64(base) > (int64(full)-int64(base))/2 {
		t.Fatalf("heap did not shrink: base %d full %d end %d", base, full, end)
	}
	runtime.KeepAlive(ix)
}
