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
	c := &checker{ix: ix, want: make(map[holderKey][kv.NumTiers]uint32)}
	for _, ws := range wss {
		c.bindings(ws)
	}
	c.registry()
	for si, sh := range ix.shards {
		c.shard(si, sh)
	}
	for hk := range c.want {
		c.fail("worker slot %d: bound to node %d/%d, which does not list it", hk.slot, hk.shard, hk.node)
	}
	return errors.Join(c.errs...)
}

// checker collects CheckInvariants' findings (the first 20).
type checker struct {
	ix *Index
	// want is, per worker slot on a node, the number of its engine hashes
	// bound there with a copy on each tier: what the node's holder entry
	// must count. The holder sets' entries are crossed off as found.
	want    map[holderKey][kv.NumTiers]uint32
	retired map[uint32]bool // slots on the registry's free list
	errs    []error
}

type holderKey struct {
	shard      int
	node, slot uint32
}

func (c *checker) fail(format string, args ...any) {
	if len(c.errs) < 20 {
		c.errs = append(c.errs, fmt.Errorf(format, args...))
	}
}

// bindings checks ws's bindings and counts them into want.
func (c *checker) bindings(ws *workerState) {
	if got := ws.cached.Load(); got != uint64(ws.blocks.len()) {
		c.fail("worker %s: cached %d, holds %d", ws.w, got, ws.blocks.len())
	}
	ws.blocks.all(func(eh, v uint64) {
		b := binding(v)
		if b.empty() {
			c.fail("worker %s: engine hash %#x bound with no copies", ws.w, eh)
			return
		}
		if b.shard() >= len(c.ix.shards) {
			c.fail("worker %s: engine hash %#x in shard %d", ws.w, eh, b.shard())
			return
		}
		sh := c.ix.shards[b.shard()]
		if b.node() == rootID || b.node() >= sh.next || sh.meta(b.node()).parent == noParent {
			c.fail("worker %s: engine hash %#x bound to dead node %d/%d", ws.w, eh, b.shard(), b.node())
			return
		}
		hk := holderKey{b.shard(), b.node(), ws.slot}
		n := c.want[hk]
		for t := kv.Tier(0); t < kv.NumTiers; t++ {
			if b.copies(t) > 0 {
				n[t]++
			}
		}
		c.want[hk] = n
	})
}

// shardCheck is what checking one shard gathers on the way.
type shardCheck struct {
	si        int
	sh        *shard
	free      map[uint32]bool   // free nodes
	refs      []uint32          // nodes pointing to each set
	ents      [][]uint64        // each set's entries, listed once (see entries)
	nchild    map[uint32]uint32 // children counted per node
	live      int
	unchained int
}

// entries returns the entries of set id.
func (sc *shardCheck) entries(id uint32) []uint64 {
	if sc.ents[id] == nil {
		sc.ents[id] = sc.sh.sets[id].appendEntries([]uint64{})
	}
	return sc.ents[id]
}

// shard checks shard si: its free list, nodes, children, holder sets, spare
// arrays and interning.
func (c *checker) shard(si int, sh *shard) {
	sc := &shardCheck{si: si, sh: sh, refs: make([]uint32, len(sh.sets)), ents: make([][]uint64, len(sh.sets)),
		nchild: make(map[uint32]uint32)}
	sc.free = c.freeNodes(si, sh)
	for id := uint32(1); id < sh.next; id++ {
		if !sc.free[id] {
			c.node(sc, id)
		}
	}
	if sc.live != sh.live {
		c.fail("shard %d: live %d, counted %d", si, sh.live, sc.live)
	}
	if len(sh.chunks) == 0 {
		if sh.next != 1 || sh.live != 0 {
			c.fail("shard %d: no chunks but %d nodes", si, sh.live)
		}
		return
	}
	c.children(sc)
	c.sets(sc)
	c.spare(si, sh)
	sh.intern.all(func(h, v uint64) {
		if id := uint32(v); int(id) >= len(sh.sets) || !sh.sets[id].interned || sh.sets[id].hash != h {
			c.fail("shard %d: bad intern entry %#x -> %d", si, h, id)
		}
	})
}

// freeNodes checks sh's free list and returns its free nodes.
func (c *checker) freeNodes(si int, sh *shard) map[uint32]bool {
	listed := make(map[uint32]bool, len(sh.free))
	for _, id := range sh.free {
		if id == rootID || id >= sh.next {
			c.fail("shard %d: bad free node %d", si, id)
		}
		listed[id] = true
	}
	free := make(map[uint32]bool)
	for id := uint32(1); id < sh.next; id++ {
		if sh.meta(id).parent == noParent {
			free[id] = true
			if !listed[id] { // alloc must be able to find it
				c.fail("shard %d: free node %d is not in the free list", si, id)
			}
		}
	}
	if len(sh.free) > 2*len(free)+1024 {
		c.fail("shard %d: free lists %d ids for %d free nodes", si, len(sh.free), len(free))
	}
	return free
}

// node checks live node id: its parent, depth and segment, that it is found
// by its key, and its holder set against the bindings (crossed off in want).
func (c *checker) node(sc *shardCheck, id uint32) {
	si, sh := sc.si, sc.sh
	m := sh.meta(id)
	sc.live++
	if !chained(id, m.parent) {
		sc.unchained++
	}
	if m.parent == noParent || m.parent >= sh.next || sc.free[m.parent] {
		c.fail("shard %d: node %d has bad parent %d", si, id, m.parent)
		return
	}
	sc.nchild[m.parent]++
	if m.parent == rootID {
		if !c.ix.segmentStart(m.depth) || c.ix.shardOf(m.key) != si {
			c.fail("shard %d: node %d under the root at depth %d starts no segment of this shard", si, id, m.depth)
		}
	} else if pd := sh.meta(m.parent).depth; m.depth != pd+1 || c.ix.segmentStart(m.depth) {
		c.fail("shard %d: node %d at depth %d under a node at depth %d, or at a segment's start", si, id, m.depth, pd)
	}
	if got, ok := sh.lookup(m.parent, sh.key(id)); !ok || got != id {
		c.fail("shard %d: node %d not found by its key (got %d, %v)", si, id, got, ok)
	}
	if int(m.set) >= len(sh.sets) {
		c.fail("shard %d: node %d has bad set %d", si, id, m.set)
		return
	}
	sc.refs[m.set]++
	if m.set == emptySet && m.nchild == 0 {
		c.fail("shard %d: node %d is held by nobody and has no children", si, id)
	}
	for _, e := range sc.entries(m.set) {
		hk := holderKey{si, id, entrySlot(e)}
		w, ok := c.want[hk]
		if !ok {
			if c.retired[entrySlot(e)] {
				c.fail("shard %d: node %d lists slot %d, which is retired", si, id, entrySlot(e))
			}
			c.fail("shard %d: node %d lists slot %d, which binds nothing there", si, id, entrySlot(e))
			continue
		}
		for t := kv.Tier(0); t < kv.NumTiers; t++ {
			if got := entryCount(e, t); got != min(w[t], 0xff) {
				c.fail("shard %d: node %d slot %d tier %d: count %d, bindings %d", si, id, entrySlot(e), t, got, w[t])
			}
		}
		delete(c.want, hk)
	}
}

// children checks the nodes' child counts, the root, and the child maps.
func (c *checker) children(sc *shardCheck) {
	si, sh := sc.si, sc.sh
	for id := uint32(0); id < sh.next; id++ {
		if sc.free[id] {
			continue
		}
		if got := sh.meta(id).nchild; got != sc.nchild[id] {
			c.fail("shard %d: node %d nchild %d, counted %d", si, id, got, sc.nchild[id])
		}
	}
	if sh.meta(rootID).set != emptySet {
		c.fail("shard %d: root is held", si)
	}
	if sh.kids.len()+len(sh.over) != sc.unchained {
		c.fail("shard %d: %d keys for %d live nodes not chained", si, sh.kids.len()+len(sh.over), sc.unchained)
	}
	sh.kids.all(func(k, v uint64) {
		id := uint32(v)
		if v>>32 != 0 || id >= sh.next || sc.free[id] || sh.key(id) != k || chained(id, sh.meta(id).parent) {
			c.fail("shard %d: child-map key %x names node %d (%#x), which is free, chained or keyed otherwise", si, k, id, v)
		}
	})
	for ok, id := range sh.over {
		if id >= sh.next || sc.free[id] || sh.key(id) != ok.key || sh.meta(id).parent != ok.parent || chained(id, ok.parent) {
			c.fail("shard %d: overflow entry %v names node %d, which is free, chained or keyed otherwise", si, ok, id)
		}
	}
}

// sets checks every holder set: free sets empty, live ones referenced as
// counted, their entries sorted and hashed, their form the one their content
// gives (see hset), and their interning.
func (c *checker) sets(sc *shardCheck) {
	si, sh := sc.si, sc.sh
	freeSet := make(map[uint32]bool)
	for _, id := range sh.freeSets {
		freeSet[id] = true
	}
	for id := 1; id < len(sh.sets); id++ {
		hs := &sh.sets[id]
		if freeSet[uint32(id)] {
			if hs.e != nil || hs.bits.bm != nil || hs.bits.n != 0 || sc.refs[id] != 0 {
				c.fail("shard %d: free set %d in use", si, id)
			}
			continue
		}
		if hs.refs != sc.refs[id] || hs.refs == 0 {
			c.fail("shard %d: set %d refs %d, counted %d", si, id, hs.refs, sc.refs[id])
		}
		all := sc.entries(uint32(id))
		var h uint64
		for i, e := range all {
			if uint32(e) == 0 || (i > 0 && entrySlot(all[i-1]) >= entrySlot(e)) {
				c.fail("shard %d: set %d: bad entry %d (%#x)", si, id, i, e)
			}
			h += mixEntry(e)
		}
		if h != hs.hash || len(all) == 0 || int(hs.bits.n) != len(all) {
			c.fail("shard %d: set %d: bad hash or count, or empty", si, id)
		}
		c.setForm(si, id, hs, all)
		if iid, ok := sh.intern.get(hs.hash); hs.interned && (!ok || uint32(iid) != uint32(id)) {
			c.fail("shard %d: set %d not interned", si, id)
		}
	}
}

// setForm checks that set id (hs, with the entries all) is kept in the form
// its content gives.
func (c *checker) setForm(si, id int, hs *hset, all []uint64) {
	want := makeBits(all, func(n int) []uint64 { return make([]uint64, n) })
	if !slices.Equal(want.bm, hs.bits.bm) || want.lo != hs.bits.lo || want.w != hs.bits.w || want.tiers != hs.bits.tiers {
		c.fail("shard %d: set %d: bitmaps do not match its entries", si, id)
	}
	if want.bm != nil {
		var ex []uint64
		for _, e := range all {
			if !plainEntry(e) {
				ex = append(ex, e)
			}
		}
		if !slices.Equal(ex, hs.e) {
			c.fail("shard %d: set %d kept as bitmaps lists %d entries, %d not plain", si, id, len(hs.e), len(ex))
		}
	}
}

// spare checks sh's spare arrays: in their classes, counted, within bounds,
// and none a live set's (a set made from it would overwrite the other) or
// pooled twice.
func (c *checker) spare(si int, sh *shard) {
	arrays := make(map[*uint64]int)
	for id := range sh.sets {
		for _, a := range [][]uint64{sh.sets[id].e, sh.sets[id].bits.bm} {
			if cap(a) > 0 {
				arrays[&a[:1][0]] = id
			}
		}
	}
	words := 0
	for cl, l := range sh.spare.byClass {
		for _, a := range l {
			words += cap(a)
			if cap(a) < 1<<cl || cap(a) >= 2<<cl {
				c.fail("shard %d: spare array of %d words in class %d", si, cap(a), cl)
			}
			if id, ok := arrays[&a[:1][0]]; ok && id >= 0 {
				c.fail("shard %d: spare array belongs to set %d", si, id)
			} else if ok {
				c.fail("shard %d: spare array pooled twice", si)
			}
			arrays[&a[:1][0]] = -1
		}
	}
	if words != sh.spare.words || words > spareMaxWords {
		c.fail("shard %d: spare holds %d words, counted %d", si, words, sh.spare.words)
	}
}

// registry checks the slot table, the worker maps by rank and by id, and the
// retired slots: every slot made has a worker or is retired, once; a retired
// slot names no worker and counts no blocks (and, checked with the holder
// sets, no set lists it); retirement epochs never decrease.
func (c *checker) registry() {
	r := &c.ix.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	dir := r.slots()
	if int(r.n) > len(dir)<<slotChunkBits {
		c.fail("registry: %d slots made, %d in the directory", r.n, len(dir)<<slotChunkBits)
		return
	}
	c.retired = make(map[uint32]bool, len(r.free))
	var last uint64
	for _, f := range r.free {
		switch {
		case f.slot >= r.n:
			c.fail("registry: retired slot %d of %d made", f.slot, r.n)
			continue
		case c.retired[f.slot]:
			c.fail("registry: slot %d retired twice", f.slot)
		case slotOf(dir, f.slot).ws.Load() != nil:
			c.fail("registry: retired slot %d names worker %s", f.slot, slotOf(dir, f.slot).ws.Load().w)
		case slotOf(dir, f.slot).cached.Load() != 0:
			c.fail("registry: retired slot %d counts %d blocks", f.slot, slotOf(dir, f.slot).cached.Load())
		case f.epoch < last || f.epoch > r.epoch.Load():
			c.fail("registry: slot %d retired at epoch %d (previous %d, now %d)", f.slot, f.epoch, last, r.epoch.Load())
		}
		c.retired[f.slot] = true
		last = f.epoch
	}
	inByID := make(map[*workerState]bool)
	for id, wss := range r.byID {
		if len(wss) == 0 {
			c.fail("registry: worker %q listed with no ranks", id)
		}
		for _, ws := range wss {
			if ws.w.ID != id || inByID[ws] {
				c.fail("registry: worker %q lists rank %s (twice: %v)", id, ws.w, inByID[ws])
			}
			inByID[ws] = true
			if ws.slot >= r.n || slotOf(dir, ws.slot).ws.Load() != ws {
				c.fail("registry: rank %s's slot %d does not name it", ws.w, ws.slot)
			}
			if ws.dead.Load() {
				c.fail("registry: rank %s is listed but removed", ws.w)
			}
			if got := r.get(ws.w); got != ws {
				c.fail("registry: rank %s listed by id, not by rank", ws.w)
			}
		}
	}
	live := 0
	for s := uint32(0); s < r.n; s++ {
		ws := slotOf(dir, s).ws.Load()
		if ws == nil {
			if !c.retired[s] {
				c.fail("registry: slot %d has no worker and is not retired", s)
			}
			continue
		}
		live++
		if ws.slot != s {
			c.fail("registry: slot %d names %s, whose slot is %d", s, ws.w, ws.slot)
		}
		if !inByID[ws] && r.get(ws.w) == ws { // (a rank being removed is in neither)
			c.fail("registry: rank %s (slot %d) is not listed by id", ws.w, s)
		}
	}
	if live != r.live || live+len(r.free) != int(r.n) {
		c.fail("registry: %d slots made, %d with a worker (counted %d), %d retired", r.n, live, r.live, len(r.free))
	}
}
