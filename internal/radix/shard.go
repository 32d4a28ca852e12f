package radix

import (
	"math/bits"
	"sync"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// A shard owns the path segments (see Config.SegmentBlocks) whose first node's
// path key maps to it. A segment's first node is a child of the shard's root,
// whatever its depth, keyed by its path key: so the index tells two paths
// apart there by their 64-bit path keys alone, as it tells two prompts' first
// blocks apart by their block hashes. Everything in a shard is guarded by mu:
// writers (one run's segment, one remove batch's nodes in the shard) take it
// exclusively, Match takes it shared while it walks a segment.
//
// Nodes live in a chunked arena and are named by uint32 ids; a node carries its
// path key, a 64-bit hash chained from the root through the block hashes of its
// path (see pathKey). Because the query's path keys can be computed from the
// prompt alone, no node needs a child map: a node's child is looked for at the
// next id (a run's nodes get consecutive ids, see alloc), where it is told by
// parent and key, and only the children found elsewhere (not chained) are
// keyed by path key in the shard's kids map.
//
// A node does not list its holders itself: it points to an interned, immutable,
// reference-counted holder set (see hset). Nodes along a shared
// prefix usually have the same holders, so they point to the same set: the
// memory is shared and Match detects "nobody leaves here" by comparing set ids.
type shard struct {
	mu sync.RWMutex

	chunks []*nodeChunk
	next   uint32   // ids below next have been handed out
	free   []uint32 // freed node ids, reused first
	live   int      // live nodes, root excluded

	kids u64map           // path key -> node id, for nodes not chained
	over map[ovKey]uint32 // unchained nodes whose path key another one has in kids

	sets     []hset
	freeSets []uint32
	intern   u64map     // set content hash -> set id
	spare    spareWords // arrays of freed sets, for new sets
	sink     uint64     // keeps prefetching loads alive

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

const (
	chunkBits = 10
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1

	rootID   = 0
	noParent = ^uint32(0)
	emptySet = 0
	noSet    = ^uint32(0) // no set's id

	// rootKey is the path key of every shard's root.
	rootKey = 0x6b76726f75746572 // "kvrouter"
)

// nodeMeta is a node: 24 bytes, so that Match, which checks a node's key and
// parent and reads its set, finds the next node of a run on the same or the
// next cache line (a run's nodes get consecutive ids, see Match).
type nodeMeta struct {
	key    uint64 // path key (rootKey for the root)
	parent uint32 // noParent for the root and for free nodes
	set    uint32 // holder set id; emptySet when no worker holds the node
	nchild uint32 // live children
	depth  uint32 // blocks before this one on its path
}

type nodeChunk struct {
	meta [chunkSize]nodeMeta
}

type ovKey struct {
	parent uint32
	key    uint64
}

// hset is an immutable set of holder entries (see entry), shared by every
// node whose holders are exactly these. It is kept in one of two forms, which
// depends only on its content (see useBits), so that two sets are equal iff
// their forms are:
//   - as bitmaps, when it has bitsMinEntries entries or more over dense enough
//     slots: a bit per entry in the plane of its best tier (see setBits), and
//     in e only the entries the bits do not tell (not plainEntry);
//   - else as its entries, sorted, in e.
//
// Match reads only the bitmaps of a set that has them. A change of one entry
// (derive) copies the bitmaps, a few words per 64 workers, instead of an entry
// per worker: a popular prefix's set has a thousand entries and changes with
// every store and evict of it.
type hset struct {
	e        []uint64
	bits     setBits
	hash     uint64 // sum of mixEntry over the entries
	refs     uint32 // nodes pointing here
	interned bool   // intern[hash] == this set
}

// setBits is a holder set as bitmaps of worker slots, one plane per best tier
// its entries have, covering the 64-slot words lo..lo+w-1: Match intersects
// its active workers with a set a word at a time instead of entry by entry.
type setBits struct {
	bm    []uint64 // planes in tier order, w words each
	lo, w uint32
	tiers uint8 // the tiers that have a plane
	// n is the number of entries of the set (of either form): kept here,
	// in the padding after tiers, so that an hset is 80 bytes, not 88
	// (Match512 is about 5% faster so).
	n uint32
}

// planeOf is where tier t's plane starts in bm, or -1 when no entry has t as
// its best tier.
func planeOf(tiers uint8, t kv.Tier, w uint32) int32 {
	if tiers&(1<<t) == 0 {
		return -1
	}
	return int32(bits.OnesCount8(tiers&(1<<t-1))) * int32(w)
}

// bitsMinEntries is the smallest set kept as bitmaps; bitsMaxRatio bounds their
// words per entry (sparse slots make wide bitmaps).
const (
	bitsMinEntries = 16
	bitsMaxRatio   = 2
)

// useBits reports whether a set of n entries whose slots span w words and
// whose best tiers are tiers is kept as bitmaps.
func useBits(n, w uint32, tiers uint8) bool {
	return n >= bitsMinEntries && uint32(bits.OnesCount8(tiers))*w <= bitsMaxRatio*n
}

// plainEntry reports whether holder entry e is one copy on one tier: in a set
// kept as bitmaps, its bit says all there is to say about it.
func plainEntry(e uint64) bool {
	c := uint32(e)
	return c&(c-1) == 0 && c&0x01010101 != 0
}

// makeBits returns the bitmaps of a set with the sorted entries e, or none
// when the set is not kept as bitmaps. Their words come from alloc (contents
// arbitrary).
func makeBits(e []uint64, alloc func(n int) []uint64) setBits {
	if len(e) < bitsMinEntries {
		return setBits{}
	}
	lo, hi := entrySlot(e[0])>>6, entrySlot(e[len(e)-1])>>6
	w := hi - lo + 1
	var tiers uint8
	for _, x := range e {
		tiers |= 1 << bestTier(x)
	}
	if !useBits(uint32(len(e)), w, tiers) {
		return setBits{}
	}
	sb := setBits{bm: alloc(bits.OnesCount8(tiers) * int(w)), lo: lo, w: w, tiers: tiers}
	clear(sb.bm)
	for _, x := range e {
		s := entrySlot(x)
		sb.bm[uint32(planeOf(tiers, bestTier(x), w))+s>>6-lo] |= 1 << (s & 63)
	}
	return sb
}

// word is the union of b's planes at word x (x in lo..lo+w-1).
func (b *setBits) word(x uint32) uint64 {
	var all uint64
	for i := range uint32(bits.OnesCount8(b.tiers)) {
		all |= b.bm[i*b.w+x-b.lo]
	}
	return all
}

// tierOf is the tier of the plane holding slot's bit, or false.
func (b *setBits) tierOf(slot uint32) (kv.Tier, bool) {
	r := slot>>6 - b.lo
	if r >= b.w { // (slots below lo wrap past w)
		return 0, false
	}
	for t := range kv.NumTiers {
		if p := planeOf(b.tiers, t, b.w); p >= 0 && b.bm[p+int32(r)]&(1<<(slot&63)) != 0 {
			return t, true
		}
	}
	return 0, false
}

// appendEntries appends the entries of hs to dst, sorted.
func (hs *hset) appendEntries(dst []uint64) []uint64 {
	b := &hs.bits
	if b.bm == nil {
		return append(dst, hs.e...)
	}
	ex := hs.e
	for x := b.lo; x < b.lo+b.w; x++ {
		for all := b.word(x); all != 0; all &= all - 1 {
			slot := x<<6 | uint32(bits.TrailingZeros64(all))
			if len(ex) > 0 && entrySlot(ex[0]) == slot {
				dst = append(dst, ex[0])
				ex = ex[1:]
				continue
			}
			t, _ := b.tierOf(slot)
			dst = append(dst, uint64(slot)<<32|1<<(8*t))
		}
	}
	return dst
}

// searchSlot is the index of the first of the sorted entries e whose slot is
// slot or above.
func searchSlot(e []uint64, slot uint32) int {
	i, j := 0, len(e)
	for i < j {
		m := int(uint(i+j) >> 1)
		if entrySlot(e[m]) < slot {
			i = m + 1
		} else {
			j = m
		}
	}
	return i
}

// A holder entry packs a worker slot (high 32 bits) and, per tier t, the number
// of the worker's engine hashes bound to the node that have a copy on t (8 bits
// at bit 8t, saturating). Sorting entries sorts them by slot.
func entrySlot(e uint64) uint32 { return uint32(e >> 32) }

func entryCount(e uint64, t kv.Tier) uint32 { return uint32(e>>(8*t)) & 0xff }

// bestTier is the best tier the entry holds a copy on. e must hold one.
func bestTier(e uint64) kv.Tier {
	c := uint32(e)
	var t kv.Tier
	for c&0xff == 0 {
		c >>= 8
		t++
	}
	return t
}

// tierDelta is a per-tier change of holder counts, packed as one int8 per tier.
type tierDelta [kv.NumTiers]int8

// maxHolderCount is the most engine hashes of one worker/rank a node counts
// per tier (8 bits of a holder entry).
const maxHolderCount = 0xff

// applyDelta applies d to entry e. It reports false, and changes nothing, when
// a count would pass maxHolderCount: a count that saturated would no longer
// match the bindings, and removing them would free a node still bound.
func applyDelta(e uint64, d tierDelta) (uint64, bool) {
	out := e &^ 0xffffffff
	for t := kv.Tier(0); t < kv.NumTiers; t++ {
		c := int(entryCount(e, t)) + int(d[t])
		if c < 0 {
			c = 0
		} else if c > maxHolderCount {
			return e, false
		}
		out |= uint64(c) << (8 * t)
	}
	return out, true
}

func newShard() *shard {
	s := &shard{}
	s.reset()
	return s
}

// reset returns the shard to its empty state, releasing all memory.
func (s *shard) reset() {
	s.chunks = nil // the first chunk, with the root, comes with the first node
	s.next = 1
	s.free = nil
	s.live = 0
	s.kids = u64map{}
	s.over = nil
	s.sets = []hset{{}} // emptySet
	s.freeSets = nil
	s.intern = u64map{}
	s.spare = spareWords{}
}

func (s *shard) meta(id uint32) *nodeMeta { return &s.chunks[id>>chunkBits].meta[id&chunkMask] }

func (s *shard) key(id uint32) uint64 {
	if id == rootID {
		return rootKey
	}
	return s.chunks[id>>chunkBits].meta[id&chunkMask].key
}

// lookup finds the child of parent whose path key is k: at parent's next id
// (see chained) or in kids.
func (s *shard) lookup(parent uint32, k uint64) (uint32, bool) {
	if id := parent + 1; id < s.next {
		if m := s.meta(id); m.parent == parent && m.key == k {
			return id, true
		}
	}
	return s.lookupKids(parent, k)
}

// lookupKids finds the child of parent whose path key is k among the nodes
// that are not chained.
func (s *shard) lookupKids(parent uint32, k uint64) (uint32, bool) {
	v, ok := s.kids.get(k)
	if !ok {
		return 0, false
	}
	id := uint32(v)
	if s.meta(id).parent == parent {
		return id, true
	}
	if len(s.over) == 0 {
		return 0, false
	}
	id, ok = s.over[ovKey{parent, k}]
	return id, ok
}

// chained reports whether node id, a child of parent, has its parent's next
// id. Such a node is found there (by parent and key, which is exact) and is
// not keyed in kids: most nodes are chained (see alloc), so kids stays small
// and a store or free of a chained node touches no hash table.
func chained(id, parent uint32) bool { return id == parent+1 }

// touchUpdates touches, before a remove (or tier store) batch changes them,
// the nodes bound to the leading engine hashes of ws that lie in this shard
// (si), so that the batch's cache misses overlap instead of coming one after
// another. It stops at the first hash bound elsewhere (so a batch is touched
// once in all) and is only loads: the caller holds the shard's lock and ws's.
func (s *shard) touchUpdates(ws *workerState, si int, hashes []uint64) {
	if len(hashes) < 2 || len(s.chunks) == 0 {
		return
	}
	var sink uint64
	for _, eh := range hashes {
		v, ok := ws.blocks.get(eh)
		if !ok || binding(v).shard() != si {
			break
		}
		sink += s.key(binding(v).node())
	}
	s.sink += sink
}

// child finds or creates the child of parent whose path key is k, at depth
// (a child of the root is the first node of a segment, at any depth).
func (s *shard) child(parent uint32, k uint64, depth uint32) uint32 {
	if len(s.chunks) == 0 {
		c := new(nodeChunk)
		c.meta[rootID] = nodeMeta{key: rootKey, parent: noParent}
		s.chunks = append(s.chunks, c)
	}
	pm := s.meta(parent)
	if pm.nchild > 0 { // (a run's new nodes have none: no lookup)
		if id, ok := s.lookup(parent, k); ok {
			return id
		}
	}
	id := s.alloc(parent)
	*s.meta(id) = nodeMeta{key: k, parent: parent, depth: depth}
	pm.nchild++
	if !chained(id, parent) {
		if p, taken := s.kids.ref(k); taken {
			if s.over == nil {
				s.over = make(map[ovKey]uint32)
			}
			s.over[ovKey{parent, k}] = id
		} else {
			*p = uint64(id)
		}
	}
	s.live++
	// Keep free within 2 ids per free node (plus slack): alloc leaves listed
	// the ids it takes as a parent's next. (release only adds a listing per
	// node it frees, which keeps the bound.)
	if len(s.free) > 2*s.nfree()+1024 {
		s.compactFree()
	}
	return id
}

// alloc returns a free node id for a new child of parent: parent+1 when that
// node is free, so that a run's nodes get consecutive ids (which Match
// follows without probing) whatever order nodes were freed in; else the most
// recently freed node (release frees a chain leaf first, so the nodes after it
// are that chain's, free too); else a new id. A free node is one with no
// parent; free may also list nodes that alloc has since taken by the first
// rule (skipped here, dropped by compactFree).
func (s *shard) alloc(parent uint32) uint32 {
	if id := parent + 1; id < s.next && s.meta(id).parent == noParent {
		return id
	}
	for n := len(s.free); n > 0; n = len(s.free) {
		id := s.free[n-1]
		s.free = s.free[:n-1]
		if s.meta(id).parent == noParent {
			return id
		}
	}
	id := s.next
	s.next++
	if int(id>>chunkBits) == len(s.chunks) {
		s.chunks = append(s.chunks, new(nodeChunk))
	}
	return id
}

// nfree is the number of free nodes.
func (s *shard) nfree() int { return int(s.next) - 1 - s.live }

// compactFree drops from free the nodes that are no longer free and the
// repeats (a node freed, taken as a parent's next and freed again is listed
// twice), keeping the order of the rest.
func (s *shard) compactFree() {
	seen := make([]uint64, (s.next+63)/64)
	out := s.free[:0]
	for _, id := range s.free {
		if s.meta(id).parent == noParent && seen[id/64]&(1<<(id%64)) == 0 {
			seen[id/64] |= 1 << (id % 64)
			out = append(out, id)
		}
	}
	clear(s.free[len(out):])
	s.free = out
}

// release frees id and then every ancestor left with no holder and no child.
func (s *shard) release(id uint32) {
	for id != rootID {
		m := s.meta(id)
		if m.set != emptySet || m.nchild != 0 {
			return
		}
		k, p := s.key(id), m.parent
		if chained(id, p) { // not in kids
		} else if cur, ok := s.kids.get(k); ok && uint32(cur) == id {
			s.kids.del(k)
			for ok2, oid := range s.over {
				if ok2.key == k {
					delete(s.over, ok2)
					s.kids.set(k, uint64(oid))
					break
				}
			}
		} else {
			delete(s.over, ovKey{p, k})
		}
		m.parent = noParent
		s.meta(p).nchild--
		s.free = append(s.free, id)
		s.live--
		id = p
	}
	if s.live == 0 {
		s.reset()
	}
}

// setMemo caches the last holder-set transition of one operation: for one
// worker slot and one delta, old set -> new set. Runs along a shared prefix
// hit it at every node after the first.
type setMemo struct {
	ok       bool
	old, new uint32
	d        tierDelta
}

// adjust applies d to slot's holder entry on node id, moving the node to the
// interned set that results, and frees the node if nobody holds it any more.
// It reports false, changing nothing, when a count would pass maxHolderCount
// (only a positive d can).
func (s *shard) adjust(id, slot uint32, d tierDelta, memo *setMemo) bool {
	m := s.meta(id)
	old := m.set
	var nw uint32
	if memo.ok && memo.old == old && memo.d == d && (memo.new == emptySet || s.sets[memo.new].refs > 0) {
		nw = memo.new
	} else {
		var ok bool
		if nw, ok = s.derive(old, slot, d); !ok {
			return false
		}
		*memo = setMemo{ok: true, old: old, new: nw, d: d}
	}
	if nw == old {
		return true
	}
	if nw != emptySet {
		s.sets[nw].refs++
	}
	m.set = nw
	if old != emptySet {
		hs := &s.sets[old]
		hs.refs--
		if hs.refs == 0 {
			if hs.interned {
				s.intern.del(hs.hash)
			}
			s.spare.put(hs.e)
			s.spare.put(hs.bits.bm)
			*hs = hset{}
			s.freeSets = append(s.freeSets, old)
			if memo.new == old {
				memo.ok = false
			}
		}
	}
	if nw == emptySet {
		s.release(id)
	}
	return true
}

// derive returns the id of the set equal to set old with d applied to slot's
// entry, creating it if no interned set has that content, or false when a
// count would pass maxHolderCount. The caller takes the reference.
func (s *shard) derive(old, slot uint32, d tierDelta) (uint32, bool) {
	if s.sets[old].bits.bm != nil {
		if id, ok, done := s.deriveBits(old, slot, d); done {
			return id, ok
		}
	}
	// From and to entries. old's are copied before slot is looked for, in the
	// copy: the set is rarely in cache, and a copy streams its lines where a
	// binary search would wait for them one after another.
	os := &s.sets[old]
	n := int(os.bits.n)
	e := os.appendEntries(s.spare.get(n + 1)[:0]) // (room for an insert)
	e = e[:n+1]
	i := searchSlot(e[:n], slot)
	found := i < n && entrySlot(e[i]) == slot
	cur := uint64(slot) << 32
	if found {
		cur = e[i]
	}
	ne, ok := applyDelta(cur, d)
	if !ok || ne == cur {
		s.spare.put(e)
		return old, ok
	}
	keep := uint32(ne) != 0
	h := rehash(os.hash, cur, found, ne, keep)
	switch {
	case found && keep:
		e[i] = ne
		e = e[:n]
	case found:
		copy(e[i:], e[i+1:n])
		e = e[:n-1]
	default: // (!found: cur has no copies, so ne has some)
		copy(e[i+1:n+1], e[i:n])
		e[i] = ne
		e = e[:n+1]
	}
	if len(e) == 0 {
		s.spare.put(e)
		return emptySet, true
	}
	n = len(e)
	sb := makeBits(e, s.spare.get)
	if sb.bm != nil { // keep only the entries the bits do not tell
		ex := e[:0]
		for _, x := range e {
			if !plainEntry(x) {
				ex = append(ex, x)
			}
		}
		var own []uint64
		if len(ex) > 0 {
			own = s.spare.get(len(ex))
			copy(own, ex)
		}
		s.spare.put(e)
		e = own
	}
	return s.add(h, uint32(n), e, sb), true
}

// deriveBits is derive for a set old kept as bitmaps, when the new set is kept
// as bitmaps too (done is false otherwise, and nothing was done). It copies
// old's planes with slot's bit moved, and its entries not plain with slot's
// changed.
func (s *shard) deriveBits(old, slot uint32, d tierDelta) (id uint32, ok, done bool) {
	os := &s.sets[old]
	ob, oe := os.bits, os.e
	i := searchSlot(oe, slot)
	isEx := i < len(oe) && entrySlot(oe[i]) == slot
	cur := uint64(slot) << 32
	found := isEx
	if isEx {
		cur = oe[i]
	} else if t, in := ob.tierOf(slot); in {
		cur, found = cur|1<<(8*t), true
	}
	ne, ok := applyDelta(cur, d)
	if !ok || ne == cur {
		return old, ok, true
	}
	keep := uint32(ne) != 0
	n := os.bits.n
	if !found {
		n++
	} else if !keep {
		n--
	}
	x, bit := slot>>6, uint64(1)<<(slot&63)
	lo, hi, tiers := ob.lo, ob.lo+ob.w-1, ob.tiers
	if found { // drop cur's best tier if no other entry has it
		p := planeOf(ob.tiers, bestTier(cur), ob.w)
		others := false
		for r, v := range ob.bm[p : p+int32(ob.w)] {
			if ob.lo+uint32(r) == x {
				v &^= bit
			}
			if v != 0 {
				others = true
				break
			}
		}
		if !others {
			tiers &^= 1 << bestTier(cur)
		}
	}
	if keep {
		tiers |= 1 << bestTier(ne)
		lo, hi = min(lo, x), max(hi, x)
	} else if x == lo || x == hi { // the slot's word may be left empty
		empty := func(y uint32) bool {
			v := ob.word(y)
			if y == x {
				v &^= bit
			}
			return v == 0
		}
		for lo < hi && empty(lo) {
			lo++
		}
		for hi > lo && empty(hi) {
			hi--
		}
	}
	w := hi - lo + 1
	if !useBits(n, w, tiers) {
		return 0, false, false
	}
	sb := setBits{bm: s.spare.get(bits.OnesCount8(tiers) * int(w)), lo: lo, w: w, tiers: tiers}
	from, to := max(lo, ob.lo), min(lo+w, ob.lo+ob.w) // words both cover
	for t := range kv.NumTiers {
		np := planeOf(tiers, t, w)
		if np < 0 {
			continue
		}
		dst := sb.bm[np : np+int32(w)]
		op := planeOf(ob.tiers, t, ob.w)
		if op < 0 || from >= to {
			clear(dst)
			continue
		}
		clear(dst[:from-lo])
		copy(dst[from-lo:to-lo], ob.bm[op+int32(from-ob.lo):])
		clear(dst[to-lo:])
	}
	if found && x >= lo && x <= hi {
		if p := planeOf(tiers, bestTier(cur), w); p >= 0 {
			sb.bm[p+int32(x-lo)] &^= bit
		}
	}
	if keep {
		sb.bm[planeOf(tiers, bestTier(ne), w)+int32(x-lo)] |= bit
	}
	// The entries not plain: old's, with slot's replaced, dropped or added.
	addEx := keep && !plainEntry(ne)
	var ex []uint64
	if k := len(oe) + b2i(addEx) - b2i(isEx); k > 0 {
		ex = s.spare.get(k)
		switch {
		case isEx && addEx:
			copy(ex, oe)
			ex[i] = ne
		case isEx:
			copy(ex, oe[:i])
			copy(ex[i:], oe[i+1:])
		case addEx:
			copy(ex, oe[:i])
			ex[i] = ne
			copy(ex[i+1:], oe[i:])
		default:
			copy(ex, oe)
		}
	}
	return s.add(rehash(os.hash, cur, found, ne, keep), n, ex, sb), true, true
}

// rehash is the hash of a set whose hash is h after its entry cur (if found)
// becomes ne (if keep).
func rehash(h, cur uint64, found bool, ne uint64, keep bool) uint64 {
	if found {
		h -= mixEntry(cur)
	}
	if keep {
		h += mixEntry(ne)
	}
	return h
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// add returns the id of the interned set with the given content (hash h, n
// entries, stored form e and sb), handing e and sb's words back to the pool,
// or else of a new set made of them.
func (s *shard) add(h uint64, n uint32, e []uint64, sb setBits) uint32 {
	v, exists := s.intern.get(h)
	if iid := uint32(v); exists {
		if is := &s.sets[iid]; is.bits.n == n && equalEntries(is.e, e) && is.bits.lo == sb.lo && is.bits.w == sb.w &&
			is.bits.tiers == sb.tiers && equalEntries(is.bits.bm, sb.bm) {
			s.spare.put(e)
			s.spare.put(sb.bm)
			return iid
		}
	}
	var id uint32
	if k := len(s.freeSets); k > 0 {
		id = s.freeSets[k-1]
		s.freeSets = s.freeSets[:k-1]
	} else {
		id = uint32(len(s.sets))
		s.sets = append(s.sets, hset{})
	}
	sb.n = n
	s.sets[id] = hset{e: e, bits: sb, hash: h, interned: !exists}
	if !exists {
		s.intern.set(h, uint64(id))
	}
	return id
}

// spareWords keeps the entry and bitmap arrays of freed holder sets (those of
// spareMinWords or more) for new sets, by capacity class, up to spareMaxWords
// in all. Under churn, a popular prefix's set changes with every store and
// evict of it; reusing the arrays spares the allocator and the GC the copies.
type spareWords struct {
	byClass [32][][]uint64 // class c holds capacities in [2^c, 2^(c+1))
	words   int
}

const (
	spareMinWords = 64
	spareMaxWords = 1 << 16 // per shard: 512 KiB
)

// get returns an array of n words (contents arbitrary): a pooled one of
// class log2(n) or the next if it is large enough, else a new one of exactly n.
func (p *spareWords) get(n int) []uint64 {
	if n < spareMinWords {
		return make([]uint64, n)
	}
	c := bits.Len(uint(n)) - 1 // 2^c <= n < 2^(c+1)
	for k := c; k <= c+1 && k < len(p.byClass); k++ {
		if l := p.byClass[k]; len(l) > 0 && cap(l[len(l)-1]) >= n {
			a := l[len(l)-1]
			l[len(l)-1] = nil
			p.byClass[k] = l[:len(l)-1]
			p.words -= cap(a)
			return a[:n]
		}
	}
	return make([]uint64, n)
}

// put offers a for reuse.
func (p *spareWords) put(a []uint64) {
	c := bits.Len(uint(cap(a))) - 1
	if cap(a) < spareMinWords || c >= len(p.byClass) || p.words+cap(a) > spareMaxWords {
		return
	}
	p.byClass[c] = append(p.byClass[c], a)
	p.words += cap(a)
}

func equalEntries(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fmix64 is MurmurHash3's finalizer, a bijection on uint64.
func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// pathKey chains a child's block hash onto its parent's path key. For a fixed
// parent key it is a bijection of h, so two children of one node never share a
// key; keys of different paths may collide and are told apart by parent id.
func pathKey(parent, h uint64) uint64 {
	return fmix64(parent ^ (h * 0x9e3779b97f4a7c15))
}

// PrefixKeys appends to out one key per block hash: the key of the prefix up
// to and including that block, chained from the root as the index keys its
// nodes. Equal prefixes give equal keys; distinct prefixes collide with
// probability about 2^-64 a pair (the index itself tells collisions apart by
// parent, a caller keying its own table by these keys accepts that chance).
func PrefixKeys(blockHashes []uint64, out []uint64) []uint64 {
	k := uint64(rootKey)
	for _, h := range blockHashes {
		k = pathKey(k, h)
		out = append(out, k)
	}
	return out
}

func mixEntry(e uint64) uint64 { return fmix64(e ^ 0x5bd1e9955bd1e995) }
