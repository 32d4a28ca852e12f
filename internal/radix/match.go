package radix

import (
	"math/bits"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// matchScratch holds a Match's active workers as bitmaps. Its act and tmp
// are all zero between Matches.
type matchScratch struct {
	busy  atomic.Bool
	act   []uint64 // active workers: one plane per tier (their current best), nw words each
	tmp   []uint64 // a set without bitmaps, laid out as act while it is merged
	aw    []uint32 // the words of act that hold an active worker
	pos   []uint32 // slot - 64 lo -> index of the slot's result in res (and score in out)
	mat   []uint32 // slot - 64 lo -> the depth where the worker left (its Matched)
	res   []matchRes
	first []uint64 // the first set's planes' union, when it has bitmaps
	_     [64]byte
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

// matchRes is a worker's tier accounting while Match walks, in the order of
// out: its blocks before start, by best tier, and its best tier since.
type matchRes struct {
	byTier [kv.NumTiers]uint32
	start  uint32
	tier   kv.Tier
}

func (ix *Index) putScratch(s *matchScratch) { s.busy.Store(false) }

// zeroed returns buf[:n] if it has the capacity (its contents are then the
// caller's to keep zero) or a fresh zeroed slice.
func zeroed(buf []uint64, n int) []uint64 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]uint64, n)
}

// Match scores every worker/rank holding the first of blockHashes, named by
// Slot (see WorkerOf): Matched is the number of leading blocks it holds on any
// tier, ByTier splits them by the best tier held, Cached is its index size.
// Scores are appended to out[:0] in worker-slot order; nothing is allocated
// when out has the capacity.
//
// The walk takes the read lock of one shard at a time, that of the segment it
// is in (see Config.SegmentBlocks), so a Match racing a store sees each
// segment of the run before or after it. It finds each next node of the
// prompt from the last: a store run's new nodes get consecutive ids (a new
// child takes its parent's next id when that node is free, see shard.alloc),
// so the node after id is first looked for at id+1, on the same or the next
// cache line, and checked by key and parent, which is exact; only when that
// fails is the child map (of the nodes not so chained) probed. A segment's
// first node is found under its shard's root. Where the next node points to
// the same interned holder set as the last (the common case along a shared
// prefix) nobody can leave and that is all. Where the set changes (and at a
// segment's first node: set ids are per shard), the active workers, kept as
// bitmaps of worker slots with one plane per best tier, are intersected with
// the set's own bitmaps (built for it when it was interned, or here for small
// sets) 64 workers at a time; only workers that leave or change tier touch
// their score. The active workers start as the first node's set: its planes
// copied when it is kept as bitmaps, and per-worker tier accounting is set up
// only once a tier other than the device's turns up.
func (ix *Index) Match(blockHashes []uint64, out []Score) []Score {
	out = out[:0]
	if len(blockHashes) == 0 {
		return out
	}
	k := pathKey(rootKey, blockHashes[0])
	sh := ix.shards[ix.shardOf(k)]
	sh.mu.RLock()
	id, ok := sh.lookup(rootID, k)
	if !ok {
		sh.mu.RUnlock()
		return out
	}
	cur := sh.meta(id).set
	fs := &sh.sets[cur]
	fb := &fs.bits
	n := int(fs.bits.n)
	if n == 0 {
		sh.mu.RUnlock()
		return out
	}
	scr := ix.getScratch()
	lo, nw := fb.lo, fb.w
	if fb.bm == nil {
		lo = entrySlot(fs.e[0]) >> 6
		nw = entrySlot(fs.e[n-1])>>6 - lo + 1
	}
	act := zeroed(scr.act, int(uint32(kv.NumTiers)*nw))
	if cap(scr.pos) < int(nw*64) {
		scr.pos = make([]uint32, nw*64)
	}
	pos := scr.pos[:nw*64]
	if cap(scr.mat) < int(nw*64) {
		scr.mat = make([]uint32, nw*64)
	}
	mat := scr.mat[:nw*64]
	if cap(scr.res) < n {
		scr.res = make([]matchRes, n)
	}
	res := scr.res[:n]
	// The scores' slots, set aside now: the first set is the shard's, which
	// the walk may leave. A set kept as bitmaps is set aside as the union of
	// its planes (fw), and its slots written to out along with the scores
	// (one pass over out, not two).
	if cap(out) < n {
		out = make([]Score, n)
	} else {
		out = out[:n]
	}
	var fw []uint64
	if fb.bm == nil {
		for i, e := range fs.e {
			out[i].Slot = entrySlot(e)
		}
	} else {
		if cap(scr.first) < int(nw) {
			scr.first = make([]uint64, nw)
		}
		fw = scr.first[:nw]
		for x := range nw {
			fw[x] = fb.word(lo + x)
		}
	}
	fillSlots := func() { // (from fw, once)
		i := 0
		for x, all := range fw {
			for ; all != 0; all &= all - 1 {
				out[i].Slot = (lo+uint32(x))<<6 | uint32(bits.TrailingZeros64(all))
				i++
			}
		}
		fw = nil
	}
	aw := scr.aw[:0]
	var tiers uint8 // a superset of the active workers' tiers
	// res and pos (per-worker tier accounting) are needed only once a best
	// tier other than the device's appears; until then a worker's Score
	// follows from where it left.
	tiered := false
	fillTiers := func() { // (with everyone on the device tier so far)
		if fw != nil {
			fillSlots()
		}
		for i := range out {
			res[i] = matchRes{tier: kv.TierDevice}
			pos[out[i].Slot-lo<<6] = uint32(i)
		}
		tiered = true
	}
	if fb.bm != nil {
		// Bitmaps over the same words: copy them, plane by plane.
		for t := range kv.NumTiers {
			if p := planeOf(fb.tiers, t, nw); p >= 0 {
				copy(act[uint32(t)*nw:uint32(t+1)*nw], fb.bm[p:p+int32(nw)])
			}
		}
		for x, all := range fw {
			if all != 0 {
				aw = append(aw, uint32(x))
			}
		}
		tiers = fb.tiers
		if tiers != 1<<kv.TierDevice {
			fillTiers()
			for i := range out {
				res[i].tier, _ = fb.tierOf(out[i].Slot)
			}
		}
	} else {
		var dev uint64 // the device plane's bits of word aw[len(aw)-1]
		for _, e := range fs.e {
			s := entrySlot(e)
			t := bestTier(e)
			x := s>>6 - lo
			if len(aw) == 0 || aw[len(aw)-1] != x {
				if len(aw) > 0 {
					act[aw[len(aw)-1]] = dev
				}
				aw = append(aw, x)
				dev = 0
			}
			if t == kv.TierDevice {
				dev |= 1 << (s & 63)
			} else {
				act[uint32(t)*nw+x] |= 1 << (s & 63)
			}
			tiers |= 1 << t
		}
		act[aw[len(aw)-1]] = dev
		if tiers != 1<<kv.TierDevice {
			fillTiers()
			for i, e := range fs.e {
				res[i].tier = bestTier(e)
			}
		}
	}
	segEnd := ix.segmentEnd(0)
	d := 1
	for ; d < len(blockHashes); d++ {
		k = pathKey(k, blockHashes[d])
		var m *nodeMeta
		if uint64(d) == segEnd {
			// The next segment: in the shard its first node's key picks,
			// under that shard's root.
			segEnd = ix.segmentEnd(uint32(d))
			sh.mu.RUnlock()
			sh = ix.shards[ix.shardOf(k)]
			sh.mu.RLock()
			if id, ok = sh.lookup(rootID, k); !ok {
				break
			}
			m = sh.meta(id)
			cur = noSet // (set ids are the shard's own: merge)
		} else {
			nid := id + 1
			if nid < sh.next {
				m = sh.meta(nid)
				if m.parent != id || m.key != k {
					m = nil
				}
			}
			if m == nil {
				if nid, ok = sh.lookupKids(id, k); !ok {
					break
				}
				m = sh.meta(nid)
			}
			id = nid
		}
		if m.set == cur {
			continue
		}
		cur = m.set
		hs := &sh.sets[cur]
		// The set's planes: where tier t's plane starts in src (or -1), over
		// the words slo..slo+sw-1.
		src, slo, sw, stiers := hs.bits.bm, hs.bits.lo, hs.bits.w, hs.bits.tiers
		var off [kv.NumTiers]int32
		built := src == nil
		if built {
			scr.tmp = zeroed(scr.tmp, int(uint32(kv.NumTiers)*nw))
			src, slo, sw, stiers = scr.tmp, lo, nw, 0
			for _, e := range hs.e {
				if x := entrySlot(e)>>6 - lo; x < nw { // (slots below lo wrap past nw)
					t := bestTier(e)
					src[uint32(t)*nw+x] |= 1 << (entrySlot(e) & 63)
					stiers |= 1 << t
				}
			}
			for t := range off {
				off[t] = int32(t) * int32(nw)
			}
		} else {
			for t := range off {
				off[t] = planeOf(stiers, kv.Tier(t), sw)
			}
		}
		j := 0
		if tiers|stiers == 1<<kv.TierDevice {
			// Everyone on the device tier: workers can only leave, and
			// their tier accounting stays as it is.
			for _, x := range aw {
				var nb uint64
				if r := lo + x - slo; r < sw {
					nb = src[r]
				}
				o := act[x]
				for leave := o &^ nb; leave != 0; leave &= leave - 1 {
					mat[x<<6|uint32(bits.TrailingZeros64(leave))] = uint32(d)
				}
				if o &= nb; o != 0 {
					act[x] = o
					aw[j] = x
					j++
				} else {
					act[x] = 0
				}
			}
		} else {
			if !tiered { // (everyone active is on the device tier until here)
				fillTiers()
			}
			for _, x := range aw {
				var o, nb [kv.NumTiers]uint64
				var oall, nall uint64
				r := lo + x - slo
				for t := range kv.NumTiers {
					o[t] = act[uint32(t)*nw+x]
					oall |= o[t]
					if r < sw && off[t] >= 0 {
						nb[t] = src[off[t]+int32(r)]
						nall |= nb[t]
					}
				}
				stay := oall & nall
				for t := range kv.NumTiers {
					// Leaves at depth d, or stays on another best tier.
					for mv := o[t] &^ nb[t]; mv != 0; mv &= mv - 1 {
						b := uint32(bits.TrailingZeros64(mv))
						if stay&(1<<b) == 0 {
							mat[x<<6|b] = uint32(d)
							continue
						}
						r := &res[pos[x<<6|b]]
						r.byTier[t] += uint32(d) - r.start
						r.start = uint32(d)
						r.tier = 0
						for nb[r.tier]&(1<<b) == 0 {
							r.tier++
						}
					}
				}
				for t := range kv.NumTiers {
					act[uint32(t)*nw+x] = nb[t] & stay
				}
				if stay != 0 {
					aw[j] = x
					j++
				}
			}
		}
		if built {
			for _, e := range hs.e {
				if x := entrySlot(e)>>6 - lo; x < nw {
					src[uint32(bestTier(e))*nw+x] = 0
				}
			}
		}
		aw = aw[:j]
		tiers = stiers
		if j == 0 {
			break
		}
	}
	sh.mu.RUnlock()
	for _, x := range aw {
		for t := range kv.NumTiers {
			for o := act[uint32(t)*nw+x]; o != 0; o &= o - 1 {
				mat[x<<6|uint32(bits.TrailingZeros64(o))] = uint32(d)
			}
			act[uint32(t)*nw+x] = 0
		}
	}
	dir := ix.reg.slots()
	var fx int     // with fw: the word of the next slot,
	var all uint64 // and its bits still to emit
	for i := range out {
		var slot uint32
		if fw == nil {
			slot = out[i].Slot
		} else {
			for all == 0 {
				all = fw[fx]
				fx++
			}
			slot = (lo+uint32(fx-1))<<6 | uint32(bits.TrailingZeros64(all))
			all &= all - 1
			out[i].Slot = slot
		}
		se := slotOf(dir, slot)
		sc := &out[i] // (field by field: a Score literal is built aside and copied)
		sc.Matched = mat[slot-lo<<6]
		if tiered {
			r := &res[i]
			sc.ByTier = r.byTier
			sc.ByTier[r.tier] += sc.Matched - r.start
		} else {
			sc.ByTier = [kv.NumTiers]uint32{kv.TierDevice: sc.Matched}
		}
		sc.Cached = se.cached.Load()
	}
	scr.act, scr.aw = act, aw[:0]
	ix.putScratch(scr)
	return out
}
