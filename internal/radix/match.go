package radix

import (
	"sync/atomic"
	"unsafe"
)

// matchScratch holds a Match's active workers: their holder entries in the
// current set (slot order) and their positions in out.
type matchScratch struct {
	busy atomic.Bool
	ent  []uint64
	idx  []uint32
	sink uint64 // keeps prefetching loads alive
	_    [64]byte
}

// getScratch claims a free scratch of ix (a fixed set, so that it works the
// same under the race detector, which makes sync.Pool drop items), or returns
// a fresh one when all are busy.
func (ix *Index) getScratch() *matchScratch {
	n := uint32(len(ix.scratch))
	start := ix.scratchHint.Add(1)
	for i := range n {
		s := &ix.scratch[(start+i)%n]
		if !s.busy.Load() && s.busy.CompareAndSwap(false, true) {
			return s
		}
	}
	return new(matchScratch)
}

// eqChunk is how many holder entries Match compares at once.
const eqChunk = 16

// equalChunk reports whether the first eqChunk entries of a and b are equal,
// with the runtime's vectorized memory compare.
func equalChunk(a, b []uint64) bool {
	const n = eqChunk * 8
	return string(unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), n)) ==
		string(unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), n))
}

// matchWindow is how many child-map probes a Match issues ahead.
const matchWindow = 32

func (ix *Index) putScratch(s *matchScratch) { s.busy.Store(false) }

// Match scores every worker/rank holding the first of blockHashes: Matched is
// the number of leading blocks it holds on any tier, ByTier splits them by the
// best tier held, Cached is its index size. Scores are appended to out[:0] in
// worker-slot order; nothing is allocated when out has the capacity.
//
// The walk takes one shard's read lock and one child-map probe per depth; the
// probed slot holds the node's holder set id, so the node itself is not read.
// A prefix is identified by its 64-bit path key: while no two live nodes of
// the shard share a key (they are then told apart by parent), a prompt prefix
// the index does not hold is taken for another prefix only if their keys
// collide, a chance of about 2^-64 per indexed prefix and probe, the same
// order as two token blocks sharing a 64-bit block hash, which no index of
// block hashes can tell apart either.
// Where the next node points to the same interned holder set as the last (the
// common case along a shared prefix) nobody can leave and that is all. Only
// where the set changes are the active workers merged against it: runs of
// identical entries are skipped with one comparison each, and only workers
// that leave or change tier touch their score.
func (ix *Index) Match(blockHashes []uint64, out []Score) []Score {
	out = out[:0]
	if len(blockHashes) == 0 {
		return out
	}
	sh := ix.shards[ix.shardOf(blockHashes[0])]
	sh.mu.RLock()
	k := pathKey(rootKey, blockHashes[0])
	id, ok := sh.lookup(rootID, k)
	if !ok {
		sh.mu.RUnlock()
		return out
	}
	cur := sh.meta(id).set
	first := sh.sets[cur].e
	n := len(first)
	if n == 0 {
		sh.mu.RUnlock()
		return out
	}
	if cap(out) < n {
		out = make([]Score, n)
	} else {
		out = out[:n]
	}
	scr := ix.getScratch()
	ent := append(scr.ent[:0], first...)
	idx := scr.idx[:0]
	// While walking, a score's Cached holds its worker slot (high 32 bits)
	// and the depth where its current best tier began (low 32 bits).
	for i, e := range first {
		out[i] = Score{Cached: uint64(entrySlot(e)) << 32}
		idx = append(idx, uint32(i))
	}
	// The walk goes in windows: first the child-map probes of a whole window,
	// which do not depend on each other, so their cache misses overlap; then
	// the nodes themselves, checked against their parents.
	var ids, sets [matchWindow]uint32 // the current window's nodes and their holder sets
	// Two live nodes of this shard share a path key: check every node's
	// parent, as lookup does. Otherwise a probe that finds the key has found
	// the prefix (see Match's doc on collisions).
	collided := len(sh.over) > 0
	var keys [matchWindow]uint64 // the current window's keys, then its found nodes' keys
	var next [matchWindow]uint64 // the next window's keys, already touched
	// touch computes the path keys of the window starting at depth from,
	// chained from key kk, into next, and touches their child-map slots: the
	// loads do not depend on each other, so the CPU overlaps their misses.
	touch := func(from int, kk uint64) {
		end := min(from+matchWindow, len(blockHashes))
		for e := from; e < end; e++ {
			kk = pathKey(kk, blockHashes[e])
			next[e-from] = kk
		}
		var sink uint64
		for e := range end - from {
			sink += sh.kids.first(next[e])
		}
		scr.sink += sink
	}
	d := 1
	touch(d, k)
walk:
	for d < len(blockHashes) {
		m, start, end := 0, d, min(d+matchWindow, len(blockHashes))
		keys = next
		for e := range end - start {
			k = keys[e]
			v, ok := sh.kids.get(k)
			if !ok {
				break
			}
			ids[m], sets[m], keys[m] = uint32(v), uint32(v>>32), k
			m++
		}
		// Software pipelining: the next window's probes go out while this
		// window's nodes are checked and merged.
		if m == end-start && end < len(blockHashes) {
			touch(end, keys[m-1])
		}
		for x := range m {
			nid, s := ids[x], sets[x]
			if collided && sh.meta(nid).parent != id {
				var ok bool // a path-key collision: the node is in the overflow map, if anywhere
				if nid, ok = sh.lookup(id, keys[x]); !ok {
					break walk
				}
				s = sh.meta(nid).set
			}
			id = nid
			if s == cur {
				d++
				continue
			}
			cur = s
			ne := sh.sets[s].e
			sparse := n*16 < len(ne)
			i, j, w := 0, 0, 0
			for i < n {
				// Skip blocks of identical entries with one vectorized compare.
				for i+eqChunk <= n && j+eqChunk <= len(ne) && equalChunk(ent[i:], ne[j:]) {
					if w != i {
						copy(ent[w:w+eqChunk], ent[i:i+eqChunk])
						copy(idx[w:w+eqChunk], idx[i:i+eqChunk])
					}
					i, j, w = i+eqChunk, j+eqChunk, w+eqChunk
				}
				// Then at least a chunk's worth one entry at a time.
				for stop := min(n, i+eqChunk); i < stop; {
					if j < len(ne) && ent[i] == ne[j] {
						if w != i {
							ent[w], idx[w] = ent[i], idx[i]
						}
						i, j, w = i+1, j+1, w+1
						continue
					}
					slot := entrySlot(ent[i])
					if sparse {
						lo, hi := j, len(ne)
						for lo < hi {
							mid := int(uint(lo+hi) >> 1)
							if entrySlot(ne[mid]) < slot {
								lo = mid + 1
							} else {
								hi = mid
							}
						}
						j = lo
					} else {
						for j < len(ne) && entrySlot(ne[j]) < slot {
							j++
						}
					}
					sc := &out[idx[i]]
					if j < len(ne) && entrySlot(ne[j]) == slot {
						// Stays, with other counts: note a change of best tier.
						if t, nt := bestTier(ent[i]), bestTier(ne[j]); t != nt {
							sc.ByTier[t] += uint32(d) - uint32(sc.Cached)
							sc.Cached = sc.Cached&^0xffffffff | uint64(d)
						}
						ent[w], idx[w] = ne[j], idx[i]
						i, j, w = i+1, j+1, w+1
						continue
					}
					// Leaves at depth d.
					sc.ByTier[bestTier(ent[i])] += uint32(d) - uint32(sc.Cached)
					sc.Matched = uint32(d)
					i++
				}
			}
			n = w
			if n == 0 {
				break walk
			}
			d++
		}
		if m < end-start {
			break // a probe missed: no node that deep
		}
	}
	for i := range n {
		sc := &out[idx[i]]
		sc.ByTier[bestTier(ent[i])] += uint32(d) - uint32(sc.Cached)
		sc.Matched = uint32(d)
	}
	sh.mu.RUnlock()
	scr.ent, scr.idx = ent[:0], idx[:0]
	ix.putScratch(scr)
	dir := ix.reg.slots()
	for i := range out {
		slot := uint32(out[i].Cached >> 32)
		e := slotOf(dir, slot)
		out[i].Worker = e.w
		out[i].Slot = slot
		out[i].Cached = e.cached.Load()
	}
	return out
}
