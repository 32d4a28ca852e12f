package radix

import (
	"fmt"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestMatchNeverExceedsCached: a Match racing a store that spans segments
// (and so shards) never finds a worker matching more blocks than the index
// size it reports for it: the size is published before each segment's
// blocks are visible.
func TestMatchNeverExceedsCached(t *testing.T) {
	ix := New(Config{SegmentBlocks: 1})
	const n, workers = 512, 300
	blocks := make([]kv.Block, n)
	hashes := make([]uint64, n)
	for i := range blocks {
		blocks[i] = kv.Block{EngineHash: uint64(i + 1), BlockHash: uint64(7000 + i)}
		hashes[i] = blocks[i].BlockHash
	}
	done := make(chan struct{})
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var out []Score
		for {
			select {
			case <-done:
				return
			default:
			}
			out = ix.Match(hashes, out)
			for _, s := range out {
				if uint64(s.Matched) > s.Cached {
					errc <- fmt.Errorf("slot %d matched %d blocks, counts %d", s.Slot, s.Matched, s.Cached)
					return
				}
			}
		}
	}()
	for w := range workers {
		if err := ix.Store(kv.WorkerRank{ID: fmt.Sprint("w", w)}, 0, false, kv.TierDevice, blocks); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}
