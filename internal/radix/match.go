package radix

// Match scores every worker/rank holding the first of blockHashes: Matched is
// the number of leading blocks it holds on any tier, ByTier splits them by the
// best tier held, Cached is its index size. Scores are appended to out[:0] in
// worker-slot order; nothing is allocated when out has the capacity.
//
// The walk takes one shard's read lock. Along the prompt it keeps the active
// workers' holder set; where the next node points to the same interned set (the
// common case along a shared prefix) nobody can leave and the step costs one
// map probe. Only where the set changes are the active workers merged against
// it, and then only those still active.
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
	ents := sh.sets[cur].e
	if len(ents) == 0 {
		sh.mu.RUnlock()
		return out
	}
	if cap(out) < len(ents) {
		out = make([]Score, len(ents))
	} else {
		out = out[:len(ents)]
	}
	// While walking, the active scores are out[:nact], in slot order; each
	// keeps its worker slot in Cached and the best tier it holds in the current
	// segment in Matched. Scores that left are final and sit after them.
	for i, e := range ents {
		out[i] = Score{Matched: uint32(bestTier(e)), Cached: uint64(entrySlot(e))}
	}
	nact := len(out)
	segStart, prev, d := 0, id, 1
	for ; d < len(blockHashes); d++ {
		k = pathKey(k, blockHashes[d])
		nid, ok := sh.lookup(prev, k)
		if !ok {
			break
		}
		prev = nid
		s := sh.meta(nid).set
		if s == cur {
			continue
		}
		seg := uint32(d - segStart)
		ne := sh.sets[s].e
		sparse := nact*16 < len(ne)
		j, p := 0, 0
		for i := range nact {
			sc := &out[i]
			sc.ByTier[sc.Matched] += seg
			slot := uint32(sc.Cached)
			if sparse {
				lo, hi := p, len(ne)
				for lo < hi {
					m := int(uint(lo+hi) >> 1)
					if entrySlot(ne[m]) < slot {
						lo = m + 1
					} else {
						hi = m
					}
				}
				p = lo
			} else {
				for p < len(ne) && entrySlot(ne[p]) < slot {
					p++
				}
			}
			if p < len(ne) && entrySlot(ne[p]) == slot {
				// Stays: move to the front, keeping the active scores in slot
				// order (the score it displaces has left).
				sc.Matched = uint32(bestTier(ne[p]))
				if i != j {
					out[i], out[j] = out[j], out[i]
				}
				j++
			} else {
				sc.Matched = uint32(d)
			}
		}
		nact = j
		cur, segStart = s, d
		if j == 0 {
			break
		}
	}
	for i := range nact {
		sc := &out[i]
		sc.ByTier[sc.Matched] += uint32(d - segStart)
		sc.Matched = uint32(d)
	}
	sh.mu.RUnlock()
	dir := ix.reg.slots()
	for i := range out {
		ws := bySlot(dir, uint32(out[i].Cached))
		out[i].Worker = ws.w
		out[i].Cached = ws.cached.Load()
	}
	return out
}
