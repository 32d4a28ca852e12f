package radix

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

func TestRandomSequential(t *testing.T) {
	for seed := range uint64(4) {
		// Short segments make most paths cross shards (1: segments start at
		// depths 1, 2, 4 and 8); the default keeps these paths in one.
		seg := []int{1, 2, 3, 0}[seed]
		t.Run(fmt.Sprintf("seed=%d/segment=%d", seed, seg), func(t *testing.T) {
			ix := New(Config{Shards: 4, SegmentBlocks: seg, CheckInvariants: true, SlotReuseDelay: -1})
			m := newRefModel(ix.segmentStart)
			r := rand.New(rand.NewPCG(seed, 7))
			g := &opGen{r: r, salt: map[kv.WorkerRank]uint64{}, maxLen: 6}
			for i := range 3 {
				for rank := range 2 {
					w := kv.WorkerRank{ID: fmt.Sprintf("w%d", i), DPRank: uint32(rank)}
					g.ranks = append(g.ranks, w)
					if i%2 == 1 {
						g.salt[w] = uint64(i*10 + rank + 1)
					}
				}
			}
			prompts := make([][]uint64, 100)
			for i := range prompts {
				prompts[i] = randPrompt(r, 1+r.IntN(8))
			}
			for i := range 1500 {
				op := g.next()
				err := applyBoth(ix, m, op)
				if err != nil && !errors.Is(err, errModel) {
					t.Fatalf("op %d: %v", i, err)
				}
				g.learn(op, err)
				if i%100 == 99 {
					compareAll(t, ix, m, prompts, g.ranks)
				}
			}
			compareAll(t, ix, m, prompts, g.ranks)
			t.Logf("stats %+v", ix.Stats())
		})
	}
}

// TestRandomConcurrent drives the index and the model with the same random
// operations from one goroutine per worker (two ranks each), while matchers
// run concurrently and check what must hold of any result. At each quiescent
// point between rounds every match, Cached, Workers and Stats must equal the
// model's, and the invariants must hold.
func TestRandomConcurrent(t *testing.T) {
	const (
		writers = 8
		rounds  = 8
		ops     = 250
	)
	ix := New(Config{Shards: 8, SegmentBlocks: 2, SlotReuseDelay: -1}) // (paths cross segments; removed workers' slots reused at once)
	m := newRefModel(ix.segmentStart)
	r := rand.New(rand.NewPCG(42, 42))
	prompts := make([][]uint64, 200)
	for i := range prompts {
		prompts[i] = randPrompt(r, 1+r.IntN(10))
	}
	gens, all := concurrentGens(writers)
	for round := range rounds {
		if err := writeRacingMatches(ix, m, gens, ops, prompts); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// Quiescent: compare everything, with matchers racing each other.
		if err := matchAllConcurrently(ix, m, prompts); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		compareAll(t, ix, m, prompts, all)
	}
	// The whole fleet leaves: nothing may remain.
	for _, w := range all {
		ix.RemoveWorker(w.ID)
		m.RemoveWorker(w.ID)
	}
	compareAll(t, ix, m, prompts, all)
	if st := ix.Stats(); st.Nodes != 0 || st.Residencies != 0 {
		t.Fatalf("after removing every worker: %+v", st)
	}
}

// concurrentGens returns one operation generator per writer, each for two
// ranks of its own worker, and all their ranks.
func concurrentGens(writers int) ([]*opGen, []kv.WorkerRank) {
	gens := make([]*opGen, writers)
	var all []kv.WorkerRank
	for i := range gens {
		g := &opGen{r: rand.New(rand.NewPCG(uint64(i), 99)), salt: map[kv.WorkerRank]uint64{}, maxLen: 8}
		for rank := range 2 {
			w := kv.WorkerRank{ID: fmt.Sprintf("w%02d", i), DPRank: uint32(rank)}
			g.ranks = append(g.ranks, w)
			all = append(all, w)
			if i%2 == 1 {
				g.salt[w] = uint64(i*10 + rank + 1)
			}
		}
		gens[i] = g
	}
	return gens, all
}

// writeRacingMatches applies ops operations of each generator to ix and m, a
// goroutine per generator, while three matchers check every match against
// checkScoreSanity until the writers are done. It returns the first error.
func writeRacingMatches(ix *Index, m *refModel, gens []*opGen, ops int, prompts [][]uint64) error {
	var wg sync.WaitGroup
	errc := make(chan error, len(gens)+4)
	stop := make(chan struct{})
	var mwg sync.WaitGroup
	for mi := range 3 {
		mwg.Add(1)
		go func() {
			defer mwg.Done()
			var buf []Score
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := prompts[(i*7+mi)%len(prompts)]
				buf = ix.Match(p, buf)
				if err := checkScoreSanity(p, buf); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	for _, g := range gens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range ops {
				op := g.next()
				err := applyBoth(ix, m, op)
				if err != nil && !errors.Is(err, errModel) {
					errc <- err
					return
				}
				g.learn(op, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	mwg.Wait()
	return firstError(errc)
}

// matchAllConcurrently matches every prompt on four goroutines and compares
// each match with the model's. It returns the first difference.
func matchAllConcurrently(ix *Index, m *refModel, prompts [][]uint64) error {
	errc := make(chan error, 4)
	var cwg sync.WaitGroup
	for mi := range 4 {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			var buf []Score
			for i := mi; i < len(prompts); i += 4 {
				buf = ix.Match(prompts[i], buf)
				got := nameScores(ix, buf)
				sortScores(got)
				if want := m.Match(prompts[i]); !slices.Equal(got, want) {
					errc <- fmt.Errorf("match %v:\n got %v\nwant %v", prompts[i], got, want)
					return
				}
			}
		}()
	}
	cwg.Wait()
	return firstError(errc)
}

// firstError returns the first error sent on errc, or nil.
func firstError(errc chan error) error {
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// TestRandomWideFleet checks Match against the model where holder sets are
// large (many workers on one long shared path, each with random holes, tier
// changes and re-stores), so that Match intersects bitmaps of many words:
// sets with bitmaps and without, holders whose slots start past the first
// word (idle workers registered before them), and slots so sparse that sets
// get no bitmaps.
func TestRandomWideFleet(t *testing.T) {
	for _, tc := range []struct {
		name            string
		workers, idle   int // holders of the path; idle workers registered before each
		idleEvery, seed int // every idleEvery-th holder
	}{
		{"dense", 120, 0, 1, 9},
		{"offset", 300, 130, 1000, 10},
		{"mixed", 200, 40, 7, 11},
		{"sparse", 24, 150, 1, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := wideFleet(t, tc.workers, tc.idle, tc.idleEvery, uint64(tc.seed))
			with, without := setsByBitmaps(ix)
			if sparse := tc.name == "sparse"; sparse && (with != 0 || without == 0) || !sparse && with == 0 {
				t.Fatalf("%d sets of %d+ entries with bitmaps, %d without", with, bitsMinEntries, without)
			}
		})
	}
}

// setsByBitmaps counts the sets of bitsMinEntries or more entries with and
// without bitmaps.
func setsByBitmaps(ix *Index) (with, without int) {
	for _, sh := range ix.shards {
		for _, hs := range sh.sets {
			if len(hs.bits.bm) > 0 {
				with++
			} else if hs.bits.n >= bitsMinEntries {
				without++
			}
		}
	}
	return with, without
}

func wideFleet(t *testing.T, workers, idle, idleEvery int, seed uint64) *Index {
	const depth = 100
	ix := New(Config{Shards: 2, SlotReuseDelay: -1})
	m := newRefModel(ix.segmentStart)
	r := rand.New(rand.NewPCG(seed, 9))
	path := make([]uint64, depth)
	for i := range path {
		path[i] = uint64(1000 + i)
	}
	var all []kv.WorkerRank
	eh := func(w, i int) uint64 { return uint64(w)<<32 | uint64(i+1) }
	for wi := range workers {
		if wi%idleEvery == 0 {
			for j := range idle {
				w := kv.WorkerRank{ID: fmt.Sprintf("idle%03d-%03d", wi, j)}
				all = append(all, w)
				// (A block of its own: the holder sets stay the path's.)
				op := randOp{kind: "store", w: w, blocks: []kv.Block{{EngineHash: 1, BlockHash: 1<<40 + uint64(len(all))}}}
				if err := applyBoth(ix, m, op); err != nil {
					t.Fatal(err)
				}
			}
		}
		w := kv.WorkerRank{ID: fmt.Sprintf("w%03d", wi)}
		all = append(all, w)
		n := depth - r.IntN(depth/2)*r.IntN(2)
		var blocks []kv.Block
		for i := range n {
			blocks = append(blocks, kv.Block{EngineHash: eh(wi, i), BlockHash: path[i]})
		}
		if err := applyBoth(ix, m, randOp{kind: "store", w: w, blocks: blocks}); err != nil {
			t.Fatal(err)
		}
	}
	prompts := [][]uint64{path, path[:depth/2], append(slices.Clone(path[:depth-1]), 5)}
	holders := slices.DeleteFunc(slices.Clone(all), func(w kv.WorkerRank) bool { return strings.HasPrefix(w.ID, "idle") })
	for round := range 30 {
		for range 40 {
			wi := r.IntN(workers)
			w := holders[wi]
			i := r.IntN(depth)
			if r.IntN(8) == 0 { // the first node: Match starts from its set's tiers
				i = 0
			}
			var op randOp
			switch r.IntN(4) {
			case 0:
				op = randOp{kind: "remove", w: w, tier: kv.TierDevice, hashes: []uint64{eh(wi, i)}}
			case 1:
				op = randOp{kind: "storetier", w: w, tier: kv.TierHost, hashes: []uint64{eh(wi, i), eh(wi, i+1)}}
			case 2:
				if i == 0 {
					continue
				}
				op = randOp{kind: "store", w: w, hasParent: true, parent: eh(wi, i-1),
					blocks: []kv.Block{{EngineHash: eh(wi, i), BlockHash: path[i]}}}
			case 3:
				op = randOp{kind: "remove", w: w, tier: kv.TierHost, hashes: []uint64{eh(wi, i)}}
			}
			if err := applyBoth(ix, m, op); err != nil && !errors.Is(err, errModel) {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		compareAll(t, ix, m, prompts, all)
	}
	return ix
}
