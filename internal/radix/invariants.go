package radix

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// CheckInvariants verifies the whole index: tree structure, child keys, holder
// set contents, reference counts and interning, and that every worker's
// bindings agree with the holder sets. It locks everything; use it in tests.
func (ix *Index) CheckInvariants() error {
	wss := ix.reg.all()
	for _, ws := range wss {
		ws.mu.Lock()
		defer ws.mu.Unlock()
	}
	for _, sh := range ix.shards {
		sh.mu.RLock()
		defer sh.mu.RUnlock()
	}
	type hkey struct {
		shard      int
		node, slot uint32
	}
	want := make(map[hkey][kv.NumTiers]uint32)
	var errs []error
	fail := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	for _, ws := range wss {
		if got := ws.cached.Load(); got != uint64(ws.blocks.len()) {
			fail("worker %s: cached %d, holds %d", ws.w, got, ws.blocks.len())
		}
		ws.blocks.all(func(eh, v uint64) {
			b := binding(v)
			if b.empty() {
				fail("worker %s: engine hash %#x bound with no copies", ws.w, eh)
				return
			}
			if b.shard() >= len(ix.shards) {
				fail("worker %s: engine hash %#x in shard %d", ws.w, eh, b.shard())
				return
			}
			sh := ix.shards[b.shard()]
			if b.node() == rootID || b.node() >= sh.next || sh.meta(b.node()).parent == noParent {
				fail("worker %s: engine hash %#x bound to dead node %d/%d", ws.w, eh, b.shard(), b.node())
				return
			}
			hk := hkey{b.shard(), b.node(), ws.slot}
			c := want[hk]
			for t := kv.Tier(0); t < kv.NumTiers; t++ {
				if b.copies(t) > 0 {
					c[t]++
				}
			}
			want[hk] = c
		})
	}
	for si, sh := range ix.shards {
		listed := make(map[uint32]bool, len(sh.free))
		for _, id := range sh.free {
			if id == rootID || id >= sh.next {
				fail("shard %d: bad free node %d", si, id)
			}
			listed[id] = true
		}
		free := make(map[uint32]bool)
		for id := uint32(1); id < sh.next; id++ {
			if sh.meta(id).parent == noParent {
				free[id] = true
				if !listed[id] { // alloc must be able to find it
					fail("shard %d: free node %d is not in the free list", si, id)
				}
			}
		}
		if len(sh.free) > 2*len(free)+1024 {
			fail("shard %d: free lists %d ids for %d free nodes", si, len(sh.free), len(free))
		}
		refs := make([]uint32, len(sh.sets))
		ents := make([][]uint64, len(sh.sets)) // each set's entries, as listed once
		entries := func(id uint32) []uint64 {
			if ents[id] == nil {
				ents[id] = sh.sets[id].appendEntries([]uint64{})
			}
			return ents[id]
		}
		nchild := make(map[uint32]uint32)
		live, unchained := 0, 0
		for id := uint32(1); id < sh.next; id++ {
			m := sh.meta(id)
			if free[id] {
				continue
			}
			live++
			if !chained(id, m.parent) {
				unchained++
			}
			if m.parent == noParent || m.parent >= sh.next || free[m.parent] {
				fail("shard %d: node %d has bad parent %d", si, id, m.parent)
				continue
			}
			nchild[m.parent]++
			if m.parent == rootID {
				if !ix.segmentStart(m.depth) || ix.shardOf(m.key) != si {
					fail("shard %d: node %d under the root at depth %d starts no segment of this shard", si, id, m.depth)
				}
			} else if pd := sh.meta(m.parent).depth; m.depth != pd+1 || ix.segmentStart(m.depth) {
				fail("shard %d: node %d at depth %d under a node at depth %d, or at a segment's start", si, id, m.depth, pd)
			}
			if got, ok := sh.lookup(m.parent, sh.key(id)); !ok || got != id {
				fail("shard %d: node %d not found by its key (got %d, %v)", si, id, got, ok)
			}
			if int(m.set) >= len(sh.sets) {
				fail("shard %d: node %d has bad set %d", si, id, m.set)
				continue
			}
			refs[m.set]++
			if m.set == emptySet && m.nchild == 0 {
				fail("shard %d: node %d is held by nobody and has no children", si, id)
			}
			for _, e := range entries(m.set) {
				hk := hkey{si, id, entrySlot(e)}
				w, ok := want[hk]
				if !ok {
					fail("shard %d: node %d lists slot %d, which binds nothing there", si, id, entrySlot(e))
					continue
				}
				for t := kv.Tier(0); t < kv.NumTiers; t++ {
					if got := entryCount(e, t); got != min(w[t], 0xff) {
						fail("shard %d: node %d slot %d tier %d: count %d, bindings %d", si, id, entrySlot(e), t, got, w[t])
					}
				}
				delete(want, hk)
			}
		}
		if live != sh.live {
			fail("shard %d: live %d, counted %d", si, sh.live, live)
		}
		if len(sh.chunks) == 0 {
			if sh.next != 1 || sh.live != 0 {
				fail("shard %d: no chunks but %d nodes", si, sh.live)
			}
			continue
		}
		for id := uint32(0); id < sh.next; id++ {
			if free[id] {
				continue
			}
			if got := sh.meta(id).nchild; got != nchild[id] {
				fail("shard %d: node %d nchild %d, counted %d", si, id, got, nchild[id])
			}
		}
		if sh.meta(rootID).set != emptySet {
			fail("shard %d: root is held", si)
		}
		if sh.kids.len()+len(sh.over) != unchained {
			fail("shard %d: %d keys for %d live nodes not chained", si, sh.kids.len()+len(sh.over), unchained)
		}
		sh.kids.all(func(k, v uint64) {
			id := uint32(v)
			if v>>32 != 0 || id >= sh.next || free[id] || sh.key(id) != k || chained(id, sh.meta(id).parent) {
				fail("shard %d: child-map key %x names node %d (%#x), which is free, chained or keyed otherwise", si, k, id, v)
			}
		})
		for ok, id := range sh.over {
			if id >= sh.next || free[id] || sh.key(id) != ok.key || sh.meta(id).parent != ok.parent || chained(id, ok.parent) {
				fail("shard %d: overflow entry %v names node %d, which is free, chained or keyed otherwise", si, ok, id)
			}
		}
		freeSet := make(map[uint32]bool)
		for _, id := range sh.freeSets {
			freeSet[id] = true
		}
		for id := 1; id < len(sh.sets); id++ {
			hs := &sh.sets[id]
			if freeSet[uint32(id)] {
				if hs.e != nil || hs.bits.bm != nil || hs.bits.n != 0 || refs[id] != 0 {
					fail("shard %d: free set %d in use", si, id)
				}
				continue
			}
			if hs.refs != refs[id] || hs.refs == 0 {
				fail("shard %d: set %d refs %d, counted %d", si, id, hs.refs, refs[id])
			}
			all := entries(uint32(id))
			var h uint64
			for i, e := range all {
				if uint32(e) == 0 || (i > 0 && entrySlot(all[i-1]) >= entrySlot(e)) {
					fail("shard %d: set %d: bad entry %d (%#x)", si, id, i, e)
				}
				h += mixEntry(e)
			}
			if h != hs.hash || len(all) == 0 || int(hs.bits.n) != len(all) {
				fail("shard %d: set %d: bad hash or count, or empty", si, id)
			}
			// Its form is the one its content gives (see hset).
			want := makeBits(all, func(n int) []uint64 { return make([]uint64, n) })
			if !slices.Equal(want.bm, hs.bits.bm) || want.lo != hs.bits.lo || want.w != hs.bits.w || want.tiers != hs.bits.tiers {
				fail("shard %d: set %d: bitmaps do not match its entries", si, id)
			}
			if want.bm != nil {
				var ex []uint64
				for _, e := range all {
					if !plainEntry(e) {
						ex = append(ex, e)
					}
				}
				if !slices.Equal(ex, hs.e) {
					fail("shard %d: set %d kept as bitmaps lists %d entries, %d not plain", si, id, len(hs.e), len(ex))
				}
			}
			if iid, ok := sh.intern.get(hs.hash); hs.interned && (!ok || uint32(iid) != uint32(id)) {
				fail("shard %d: set %d not interned", si, id)
			}
		}
		// A spare array must not be a live set's (a set made from it would
		// overwrite the other).
		arrays := make(map[*uint64]int)
		for id := range sh.sets {
			for _, a := range [][]uint64{sh.sets[id].e, sh.sets[id].bits.bm} {
				if cap(a) > 0 {
					arrays[&a[:1][0]] = id
				}
			}
		}
		words := 0
		for c, l := range sh.spare.byClass {
			for _, a := range l {
				words += cap(a)
				if cap(a) < 1<<c || cap(a) >= 2<<c {
					fail("shard %d: spare array of %d words in class %d", si, cap(a), c)
				}
				if id, ok := arrays[&a[:1][0]]; ok && id >= 0 {
					fail("shard %d: spare array belongs to set %d", si, id)
				} else if ok {
					fail("shard %d: spare array pooled twice", si)
				}
				arrays[&a[:1][0]] = -1
			}
		}
		if words != sh.spare.words || words > spareMaxWords {
			fail("shard %d: spare holds %d words, counted %d", si, words, sh.spare.words)
		}
		sh.intern.all(func(h, v uint64) {
			if id := uint32(v); int(id) >= len(sh.sets) || !sh.sets[id].interned || sh.sets[id].hash != h {
				fail("shard %d: bad intern entry %#x -> %d", si, h, id)
			}
		})
	}
	for hk := range want {
		fail("worker slot %d: bound to node %d/%d, which does not list it", hk.slot, hk.shard, hk.node)
	}
	return errors.Join(errs...)
}
