package radix

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestPathKeyCollision forces two live nodes with one path key (under
// different parents), which real hashes produce about never, and checks
// lookup, release and the promotion of the overflow entry.
func TestPathKeyCollision(t *testing.T) {
	s := newShard()
	var memo setMemo
	hold := func(id uint32, d int8) { s.adjust(id, 7, tierOne(kv.TierDevice, d), &memo) }
	a := s.child(rootID, 111, 0)
	b := s.child(rootID, 222, 0)
	hold(a, 1)
	hold(b, 1)
	const k = 999
	ca := s.child(a, k, 1)
	hold(ca, 1)
	cb := s.child(b, k, 1) // same key, other parent: goes to the overflow map
	hold(cb, 1)
	if ca == cb || len(s.over) != 1 {
		t.Fatalf("collision not kept apart: %d %d over=%v", ca, cb, s.over)
	}
	for _, c := range []struct{ parent, want uint32 }{{a, ca}, {b, cb}} {
		if got, ok := s.lookup(c.parent, k); !ok || got != c.want {
			t.Fatalf("lookup(%d, k) = %d, %v; want %d", c.parent, got, ok, c.want)
		}
	}
	if _, ok := s.lookup(rootID, k); ok {
		t.Fatal("found a key under the wrong parent")
	}
	// Freeing the node in the main table promotes the overflow one.
	hold(ca, -1)
	if len(s.over) != 0 {
		t.Fatalf("overflow not promoted: %v", s.over)
	}
	if got, ok := s.lookup(b, k); !ok || got != cb {
		t.Fatalf("after promotion lookup = %d, %v", got, ok)
	}
	if _, ok := s.lookup(a, k); ok {
		t.Fatal("freed node still found")
	}
	// And the other way round: free the overflow node while the main one lives.
	ca = s.child(a, k, 1)
	hold(ca, 1)
	hold(ca, -1) // ca was the overflow entry this time
	if got, ok := s.lookup(b, k); !ok || got != cb || len(s.over) != 0 {
		t.Fatalf("lookup = %d, %v, over %v", got, ok, s.over)
	}
	for _, id := range []uint32{cb, a, b} {
		hold(id, -1)
	}
	if s.live != 0 || s.kids.len() != 0 || len(s.chunks) != 0 {
		t.Fatalf("shard not empty: live %d keys %d chunks %d", s.live, s.kids.len(), len(s.chunks))
	}
}

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

func TestSpareWords(t *testing.T) {
	var p spareWords
	if a := p.get(10); len(a) != 10 || cap(a) != 10 {
		t.Fatalf("small get: len %d cap %d", len(a), cap(a))
	}
	a := p.get(100)
	if len(a) != 100 || cap(a) != 100 {
		t.Fatalf("get(100): len %d cap %d, want 100 100", len(a), cap(a))
	}
	p.put(a)
	p.put(make([]uint64, 10)) // too small to keep
	if p.words != 100 {
		t.Fatalf("words %d after putting 100 and 10", p.words)
	}
	if b := p.get(200); cap(b) != 200 || p.words != 100 {
		t.Fatalf("get(200) took the 100-word array (cap %d) or changed the pool (%d)", cap(b), p.words)
	}
	if b := p.get(101); cap(b) != 101 || p.words != 100 {
		t.Fatalf("get(101) took the 100-word array (cap %d) or changed the pool (%d)", cap(b), p.words)
	}
	if b := p.get(65); &b[0] != &a[0] || len(b) != 65 || p.words != 0 {
		t.Fatalf("get(65) did not reuse the 100-word array (len %d, words %d)", len(b), p.words)
	}
	for range spareMaxWords/1024 + 1 {
		p.put(make([]uint64, 1024))
	}
	if p.words != spareMaxWords {
		t.Fatalf("pool holds %d words, bound %d", p.words, spareMaxWords)
	}
}

// TestDerive changes one entry of random holder sets (added, dropped, or
// moved between tiers and counts, with tiers held by few entries so that
// planes come and go, and sets around the size and density where bitmaps
// start) and checks that derive gives exactly the set that its entries, built
// from scratch, make: the same entries, form and bitmaps.
func TestDerive(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	counts := func() uint64 { // per-tier counts, one device copy most often
		if r.IntN(3) > 0 {
			return 1
		}
		var c uint64
		for c == 0 {
			for tr := range kv.NumTiers {
				if r.IntN(4) == 0 || (tr == kv.TierDevice && r.IntN(2) == 0) {
					c |= uint64(1+r.IntN(3)) << (8 * tr)
				}
			}
		}
		return c
	}
	// setOf interns e in s as derive would have made it.
	setOf := func(s *shard, e []uint64) uint32 {
		var h uint64
		for _, x := range e {
			h += mixEntry(x)
		}
		sb := makeBits(e, s.spare.get)
		kept := slices.Clone(e)
		if sb.bm != nil {
			kept = slices.DeleteFunc(kept, plainEntry)
			if len(kept) == 0 {
				kept = nil
			}
		}
		return s.add(h, uint32(len(e)), kept, sb)
	}
	kinds := map[string]int{}
	for iter := range 20000 {
		n := 1 + r.IntN(60)
		gap := []int{1, 2, 3, 4, 20, 48}[r.IntN(6)] // wide gaps make sets too sparse for bitmaps
		base := uint32(r.IntN(300))
		var old []uint64
		for i := range n {
			old = append(old, uint64(base+uint32(i*gap+r.IntN(gap)))<<32|counts())
		}
		old = slices.CompactFunc(old, func(a, b uint64) bool { return entrySlot(a) == entrySlot(b) })
		// The changed slot: an existing one or a new one (maybe below or above all).
		var slot uint32
		if r.IntN(2) == 0 {
			slot = entrySlot(old[r.IntN(len(old))])
		} else {
			slot = uint32(r.IntN(int(entrySlot(old[len(old)-1])) + 200))
		}
		i, found := slices.BinarySearchFunc(old, slot, func(e uint64, s uint32) int { return cmp.Compare(entrySlot(e), s) })
		var cur uint64
		if found {
			cur = old[i]
		}
		keep := !found || r.IntN(3) > 0
		var ne uint64
		if keep {
			ne = uint64(slot)<<32 | counts()
		}
		var d tierDelta
		for tr := range kv.NumTiers {
			d[tr] = int8(entryCount(ne, tr)) - int8(entryCount(cur, tr))
		}
		e := slices.Clone(old)
		switch {
		case found && keep:
			e[i] = ne
		case found:
			e = slices.Delete(e, i, i+1)
		default:
			e = slices.Insert(e, i, ne)
		}

		s := newShard()
		oid := setOf(s, old)
		s.sets[oid].refs = 1
		got, ok := s.derive(oid, slot, d)
		if !ok {
			t.Fatalf("iter %d: derive refused", iter)
		}
		ws := newShard()
		want := uint32(emptySet)
		if len(e) > 0 {
			want = setOf(ws, e)
		}
		g, w := &s.sets[got], &ws.sets[want]
		if all := g.appendEntries(nil); !slices.Equal(all, e) || g.bits.n != w.bits.n || g.hash != w.hash || !slices.Equal(g.e, w.e) ||
			!slices.Equal(g.bits.bm, w.bits.bm) || g.bits.lo != w.bits.lo || g.bits.w != w.bits.w || g.bits.tiers != w.bits.tiers {
			t.Fatalf("iter %d: slot %d found %v keep %v: got %x %+v, want %x %+v (entries %x)", iter, slot, found, keep, g.e, g.bits, w.e, w.bits, e)
		}
		ob := s.sets[oid].bits
		switch {
		case ne == cur:
			kinds["unchanged"]++
		case ob.bm == nil && g.bits.bm != nil:
			kinds["to bitmaps"]++
		case ob.bm == nil:
			kinds["entries"]++
		case g.bits.bm == nil:
			kinds["from bitmaps"]++
		case g.bits.tiers != ob.tiers:
			kinds["planes changed"]++
		case g.bits.lo != ob.lo || g.bits.w != ob.w:
			kinds["range changed"]++
		case !slices.Equal(g.e, s.sets[oid].e):
			kinds["others changed"]++
		default:
			kinds["bit moved"]++
		}
	}
	for _, k := range []string{"entries", "to bitmaps", "from bitmaps", "planes changed", "range changed", "others changed", "bit moved"} {
		if kinds[k] < 10 {
			t.Errorf("only %d changes of kind %q (%v)", kinds[k], k, kinds)
		}
	}
	t.Log(kinds)
}

// TestRunIDsAfterInterleavedFrees frees chains level by level across chains,
// so that the free list holds their nodes interleaved (as when an engine
// evicts several requests' blocks at once), then stores new chains and checks
// that each still gets consecutive node ids, which Match follows without
// probing the child map.
func TestRunIDsAfterInterleavedFrees(t *testing.T) {
	const chains, depth = 8, 24
	ix := New(Config{SegmentBlocks: depth}) // (each chain one segment)
	w := kv.WorkerRank{ID: "w"}
	var firsts []uint64 // first blocks in one shard, so the chains share a free list
	for h := uint64(1); len(firsts) < 2*chains+1; h++ {
		if ix.rootShard(h) == ix.rootShard(1) {
			firsts = append(firsts, h)
		}
	}
	eh := func(c, i int) uint64 { return uint64(c)<<16 | uint64(i) + 1 }
	store := func(c int) {
		blocks := make([]kv.Block, depth)
		for i := range blocks {
			blocks[i] = kv.Block{EngineHash: eh(c, i), BlockHash: uint64(c)<<20 | uint64(i)}
		}
		blocks[0].BlockHash = firsts[c]
		if err := ix.Store(w, 0, false, kv.TierDevice, blocks); err != nil {
			t.Fatal(err)
		}
	}
	store(2 * chains) // stays, so that the shard is never empty (and reset)
	for c := range chains {
		store(c)
	}
	for i := depth - 1; i >= 0; i-- {
		for c := range chains {
			if err := ix.Remove(w, []uint64{eh(c, i)}, kv.TierDevice); err != nil {
				t.Fatal(err)
			}
		}
	}
	for c := chains; c < 2*chains; c++ {
		store(c)
	}
	if err := ix.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	sh := ix.shards[ix.rootShard(firsts[0])]
	steps, next := 0, 0
	for c := chains; c < 2*chains; c++ {
		k, id := pathKey(rootKey, firsts[c]), uint32(0)
		var ok bool
		if id, ok = sh.lookup(rootID, k); !ok {
			t.Fatalf("chain %d: first node not found", c)
		}
		for i := 1; i < depth; i++ {
			k = pathKey(k, uint64(c)<<20|uint64(i))
			nid, ok := sh.lookup(id, k)
			if !ok {
				t.Fatalf("chain %d: node %d not found", c, i)
			}
			steps++
			if nid == id+1 {
				next++
			}
			id = nid
		}
	}
	if next != steps {
		t.Fatalf("%d of %d steps of the new chains go to the next id, want all", next, steps)
	}
}

// TestFreeListCompaction stores and evicts one chain over and over: each time
// alloc takes the chain's first node from the free list and the rest as their
// parent's next ids, leaving their older listings behind, so the free list
// must be compacted to stay within bounds (CheckInvariants checks the bound
// and that every free node is still listed).
func TestFreeListCompaction(t *testing.T) {
	const depth = 24
	ix := New(Config{SegmentBlocks: depth}) // (each chain one segment)
	w := kv.WorkerRank{ID: "w"}
	run := func(first, tag uint64) []kv.Block {
		blocks := make([]kv.Block, depth)
		for i := range blocks {
			blocks[i] = kv.Block{EngineHash: tag<<16 | uint64(i) + 1, BlockHash: tag<<20 | uint64(i)}
		}
		blocks[0].BlockHash = first
		return blocks
	}
	var second uint64 // a first block in the shard of block 1
	for second = 2; ix.rootShard(second) != ix.rootShard(1); second++ {
	}
	if err := ix.Store(w, 0, false, kv.TierDevice, run(1, 1)); err != nil { // keeps the shard from emptying
		t.Fatal(err)
	}
	sh := ix.shards[ix.rootShard(1)]
	maxListed := 0
	for cycle := range 200 {
		blocks := run(second, 2)
		if err := ix.Store(w, 0, false, kv.TierDevice, blocks); err != nil {
			t.Fatal(err)
		}
		if err := ix.CheckInvariants(); err != nil {
			t.Fatalf("cycle %d, stored: %v", cycle, err)
		}
		maxListed = max(maxListed, len(sh.free))
		for i := depth - 1; i >= 0; i-- {
			if err := ix.Remove(w, []uint64{blocks[i].EngineHash}, kv.TierDevice); err != nil {
				t.Fatal(err)
			}
		}
		if err := ix.CheckInvariants(); err != nil {
			t.Fatalf("cycle %d, evicted: %v", cycle, err)
		}
		maxListed = max(maxListed, len(sh.free))
	}
	if maxListed < 1024 {
		t.Fatalf("the free list never grew past %d ids: compaction was not exercised", maxListed)
	}
}

// rootShard is the shard of the segment that starts with block hash h.
func (ix *Index) rootShard(h uint64) int { return ix.shardOf(pathKey(rootKey, h)) }

func TestSegmentBounds(t *testing.T) {
	for _, tc := range []struct {
		seg    int
		starts []uint32 // every segment start below 600
	}{
		{16, []uint32{0, 16, 32, 64, 128, 256, 512}},
		{1, []uint32{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512}},
		{3, []uint32{0, 3, 6, 12, 24, 48, 96, 192, 384}},
	} {
		ix := New(Config{SegmentBlocks: tc.seg})
		var got []uint32
		for d := uint32(0); d < 600; d++ {
			if ix.segmentStart(d) {
				got = append(got, d)
			}
			// segmentEnd is the next start.
			want := d + 1
			for !ix.segmentStart(want) {
				want++
			}
			if e := ix.segmentEnd(d); e != uint64(want) {
				t.Fatalf("segment %d: segmentEnd(%d) = %d, want %d", tc.seg, d, e, want)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.starts) {
			t.Errorf("segment %d: starts %v, want %v", tc.seg, got, tc.starts)
		}
	}
}

// TestSegmentsSpreadSharedPrefix stores conversations behind one shared
// prefix, as a fleet with one chat template or system prompt sees them: by
// segment, their nodes spread over the shards; with one segment per path (as
// when sharding by the first block) they all sit in one.
func TestSegmentsSpreadSharedPrefix(t *testing.T) {
	const convs, shared, length = 64, 20, 100
	for _, tc := range []struct {
		seg       int
		minShards int
		maxShards int
	}{
		{0, 32, DefaultShards}, // (64 segments from depth 64 over 64 shards: about 40)
		{1 << 20, 1, 1},
	} {
		ix := New(Config{SegmentBlocks: tc.seg, CheckInvariants: true})
		for c := range convs {
			w := kv.WorkerRank{ID: fmt.Sprintf("w%d", c)}
			blocks := make([]kv.Block, length)
			for i := range blocks {
				bh := uint64(1000 + i) // the shared prefix
				if i >= shared {
					bh = uint64(c)<<32 | uint64(i)
				}
				blocks[i] = kv.Block{EngineHash: uint64(i + 1), BlockHash: bh}
			}
			if err := ix.Store(w, 0, false, kv.TierDevice, blocks); err != nil {
				t.Fatal(err)
			}
			prompt := make([]uint64, length)
			for i, b := range blocks {
				prompt[i] = b.BlockHash
			}
			if out := ix.Match(prompt, nil); len(out) != c+1 {
				t.Fatalf("segment %d: conversation %d: %d scores, want %d", tc.seg, c, len(out), c+1)
			} else if got := out[c].Matched; got != length {
				t.Fatalf("segment %d: conversation %d matched %d blocks of its own, want %d", tc.seg, c, got, length)
			}
		}
		used := 0
		for _, sh := range ix.shards {
			if sh.live > 0 {
				used++
			}
		}
		if used < tc.minShards || used > tc.maxShards {
			t.Errorf("segment %d: nodes in %d shards, want %d..%d", tc.seg, used, tc.minShards, tc.maxShards)
		}
	}
}

// TestHsetSize keeps a holder set at 80 bytes (see setBits.n): Match reads
// one at every holder-set change of its walk.
func TestHsetSize(t *testing.T) {
	if got := unsafe.Sizeof(hset{}); got != 80 {
		t.Fatalf("hset is %d bytes, want 80", got)
	}
}
