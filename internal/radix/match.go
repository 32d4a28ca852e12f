package radix

// matchScratch is a Match's list of still-active workers, as positions in out.
type matchScratch struct{ act []int32 }

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
	scr, _ := ix.pool.Get().(*matchScratch)
	if scr == nil {
		scr = new(matchScratch)
	}
	act := scr.act[:0]
	// While walking, an active score keeps its worker slot in Cached and the
	// best tier it holds in the current segment in Matched.
	for i, e := range ents {
		out[i] = Score{Matched: uint32(bestTier(e)), Cached: uint64(entrySlot(e))}
		act = append(act, int32(i))
	}
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
		sparse := len(act)*16 < len(ne)
		j, p := 0, 0
		for _, ai := range act {
			sc := &out[ai]
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
				sc.Matched = uint32(bestTier(ne[p]))
				act[j] = ai
				j++
			} else {
				sc.Matched = uint32(d)
			}
		}
		act = act[:j]
		cur, segStart = s, d
		if j == 0 {
			break
		}
	}
	for _, ai := range act {
		sc := &out[ai]
		sc.ByTier[sc.Matched] += uint32(d - segStart)
		sc.Matched = uint32(d)
	}
	sh.mu.RUnlock()
	scr.act = act[:0]
	ix.pool.Put(scr)
	dir := ix.reg.slots()
	for i := range out {
		ws := bySlot(dir, uint32(out[i].Cached))
		out[i].Worker = ws.w
		out[i].Cached = ws.cached.Load()
	}
	return out
}
