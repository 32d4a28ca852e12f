package radix

import (
	"math/bits"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// activeSet is the workers still matching while a Match walks: bitmaps of
// worker slots, one plane per best tier, over the 64-slot words lo..lo+nw-1
// that the prompt's first holder set spans. Where the walk meets a new holder
// set, merge intersects them with the set's own bitmaps 64 workers at a time;
// only workers that leave or change tier touch their score. Per-worker tier
// accounting (res, pos) is set up only once a tier other than the device's
// turns up: until then a worker's Score follows from where it left.
//
// Each index keeps a fixed set of them, whose buffers every Match reuses (see
// getActive); act and tmp are all zero between Matches.
type activeSet struct {
	busy   atomic.Bool
	pooled bool          // one of Index.active (not made when all were busy)
	stamp  atomic.Uint64 // while a Match runs: the epoch it began in, plus 1 (see registry)

	lo, nw uint32   // the words covered
	tiers  uint8    // a superset of the active workers' best tiers
	tiered bool     // res and pos are kept
	fw     []uint64 // the first set's planes' union, while its slots are not yet in out

	act   []uint64 // active workers: one plane per tier (their current best), nw words each
	tmp   []uint64 // a set without bitmaps, laid out as act while it is merged
	aw    []uint32 // the words of act that hold an active worker
	pos   []uint32 // slot - 64 lo -> index of the slot's result in res (and score in out)
	mat   []uint32 // slot - 64 lo -> the depth where the worker left (its Matched)
	res   []matchRes
	first []uint64 // fw's array
	_     [64]byte
}

// matchRes is a worker's tier accounting while Match walks, in the order of
// out: its blocks before start, by best tier, and its best tier since.
type matchRes struct {
	byTier [kv.NumTiers]uint32
	start  uint32
	tier   kv.Tier
}

// getActive claims a free active set of ix (a fixed set, so that it works the
// same under the race detector, which makes sync.Pool drop items), or returns
// a fresh one when all are busy.
func (ix *Index) getActive() *activeSet {
	n := uint32(len(ix.active))
	start := ix.activeHint.Add(1)
	for i := range n {
		a := &ix.active[(start+i)%n]
		if !a.busy.Load() && a.busy.CompareAndSwap(false, true) {
			return a
		}
	}
	return new(activeSet)
}

func (ix *Index) putActive(a *activeSet) { a.busy.Store(false) }

// zeroed returns buf[:n] if it has the capacity (its contents are then the
// caller's to keep zero) or a fresh zeroed slice.
func zeroed(buf []uint64, n int) []uint64 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]uint64, n)
}

// sized returns buf[:n] if it has the capacity, or a fresh slice.
func sized(buf []uint32, n uint32) []uint32 {
	if cap(buf) >= int(n) {
		return buf[:n]
	}
	return make([]uint32, n)
}

// seed makes the active workers the holders of fs, the first node's holder
// set (not empty), and returns out[:0] grown to one score per holder, in slot
// order: the out that merge and scores take. A set kept as bitmaps has its
// planes copied; its slots are set aside as the union of its planes (fw), and
// written to out along with the scores (one pass over out, not two) unless
// tier accounting needs them sooner. (The caller's out is passed along rather
// than kept here, where it would escape to the heap.)
func (a *activeSet) seed(fs *hset, out []Score) []Score {
	n := int(fs.bits.n)
	lo, nw := fs.bits.lo, fs.bits.w
	if fs.bits.bm == nil {
		lo = entrySlot(fs.e[0]) >> 6
		nw = entrySlot(fs.e[n-1])>>6 - lo + 1
	}
	a.lo, a.nw, a.tiers, a.tiered, a.fw = lo, nw, 0, false, nil
	a.act = zeroed(a.act, int(uint32(kv.NumTiers)*nw))
	a.pos = sized(a.pos, nw*64)
	a.mat = sized(a.mat, nw*64)
	if cap(a.res) < n {
		a.res = make([]matchRes, n)
	}
	a.res = a.res[:n]
	if cap(out) < n {
		out = make([]Score, n)
	}
	out = out[:n]
	a.aw = a.aw[:0]
	if fs.bits.bm == nil {
		a.seedEntries(fs.e, out)
	} else {
		a.seedBits(&fs.bits, out)
	}
	return out
}

// seedBits is seed for a first set kept as bitmaps b (over the same words).
func (a *activeSet) seedBits(b *setBits, out []Score) {
	lo, nw, act := a.lo, a.nw, a.act
	if cap(a.first) < int(nw) {
		a.first = make([]uint64, nw)
	}
	fw := a.first[:nw]
	for x := range nw {
		fw[x] = b.word(lo + x)
	}
	for t := range kv.NumTiers {
		if p := planeOf(b.tiers, t, nw); p >= 0 {
			copy(act[uint32(t)*nw:uint32(t+1)*nw], b.bm[p:p+int32(nw)])
		}
	}
	aw := a.aw
	for x, all := range fw {
		if all != 0 {
			aw = append(aw, uint32(x))
		}
	}
	a.aw, a.fw, a.tiers = aw, fw, b.tiers
	if b.tiers != 1<<kv.TierDevice {
		a.startTiers(out)
		for i := range out {
			a.res[i].tier, _ = b.tierOf(out[i].Slot)
		}
	}
}

// seedEntries is seed for a first set kept as its sorted entries.
func (a *activeSet) seedEntries(entries []uint64, out []Score) {
	lo, nw, act := a.lo, a.nw, a.act
	aw := a.aw
	var tiers uint8
	var dev uint64 // the device plane's bits of word aw[len(aw)-1]
	for i, e := range entries {
		s := entrySlot(e)
		out[i].Slot = s
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
	a.aw, a.tiers = aw, tiers
	if tiers != 1<<kv.TierDevice {
		a.startTiers(out)
		for i, e := range entries {
			a.res[i].tier = bestTier(e)
		}
	}
}

// fillSlots writes the first set's slots to out from fw, once.
func (a *activeSet) fillSlots(out []Score) {
	lo := a.lo
	i := 0
	for x, all := range a.fw {
		for ; all != 0; all &= all - 1 {
			out[i].Slot = (lo+uint32(x))<<6 | uint32(bits.TrailingZeros64(all))
			i++
		}
	}
	a.fw = nil
}

// startTiers sets up per-worker tier accounting, with every worker on the
// device tier so far.
func (a *activeSet) startTiers(out []Score) {
	if a.fw != nil {
		a.fillSlots(out)
	}
	res, pos, lo := a.res, a.pos, a.lo
	for i := range out {
		res[i] = matchRes{tier: kv.TierDevice}
		pos[out[i].Slot-lo<<6] = uint32(i)
	}
	a.tiered = true
}

// setPlanes is a holder set's bitmaps as merge reads them: tier t's plane
// starts at bm[off[t]] (or off[t] is -1), over the words lo..lo+w-1.
type setPlanes struct {
	bm    []uint64
	lo, w uint32
	off   [kv.NumTiers]int32
	tiers uint8
	built bool // bm is tmp, laid out by planesOf
}

// planesOf returns hs's planes: its bitmaps, or for a set without them its
// entries laid out in tmp over the active words (see clearBuilt).
func (a *activeSet) planesOf(hs *hset) setPlanes {
	if hs.bits.bm != nil {
		p := setPlanes{bm: hs.bits.bm, lo: hs.bits.lo, w: hs.bits.w, tiers: hs.bits.tiers}
		for t := range p.off {
			p.off[t] = planeOf(p.tiers, kv.Tier(t), p.w)
		}
		return p
	}
	lo, nw := a.lo, a.nw
	a.tmp = zeroed(a.tmp, int(uint32(kv.NumTiers)*nw))
	p := setPlanes{bm: a.tmp, lo: lo, w: nw, built: true}
	for _, e := range hs.e {
		if x := entrySlot(e)>>6 - lo; x < nw { // (slots below lo wrap past nw)
			t := bestTier(e)
			p.bm[uint32(t)*nw+x] |= 1 << (entrySlot(e) & 63)
			p.tiers |= 1 << t
		}
	}
	for t := range p.off {
		p.off[t] = int32(t) * int32(nw)
	}
	return p
}

// clearBuilt zeroes the words of tmp that planesOf set for hs.
func (a *activeSet) clearBuilt(hs *hset) {
	lo, nw, tmp := a.lo, a.nw, a.tmp
	for _, e := range hs.e {
		if x := entrySlot(e)>>6 - lo; x < nw {
			tmp[uint32(bestTier(e))*nw+x] = 0
		}
	}
}

// merge intersects the active workers with hs, the holder set of the node at
// depth d, which differs from the last node's: the workers hs lacks leave
// (they matched d blocks), and those whose best tier changes have their tier
// accounting moved on. It reports whether any worker is still active.
func (a *activeSet) merge(hs *hset, d uint32, out []Score) bool {
	p := a.planesOf(hs)
	var j int
	if a.tiers|p.tiers == 1<<kv.TierDevice {
		j = a.mergeDevice(&p, d)
	} else {
		if !a.tiered { // (everyone active is on the device tier until here)
			a.startTiers(out)
		}
		j = a.mergeTiers(&p, d)
	}
	if p.built {
		a.clearBuilt(hs)
	}
	a.aw = a.aw[:j]
	a.tiers = p.tiers
	return j != 0
}

// mergeDevice is merge when every worker, active or in the set, is on the
// device tier: workers can only leave, and their tier accounting stays as it
// is. It keeps the words still active at the front of aw and returns their
// number.
func (a *activeSet) mergeDevice(p *setPlanes, d uint32) int {
	act, aw, mat, lo := a.act, a.aw, a.mat, a.lo
	src, slo, sw := p.bm, p.lo, p.w
	j := 0
	for _, x := range aw {
		var nb uint64
		if rx := lo + x - slo; rx < sw {
			nb = src[rx]
		}
		o := act[x]
		for leave := o &^ nb; leave != 0; leave &= leave - 1 {
			mat[x<<6|uint32(bits.TrailingZeros64(leave))] = d
		}
		if o &= nb; o != 0 {
			act[x] = o
			aw[j] = x
			j++
		} else {
			act[x] = 0
		}
	}
	return j
}

// mergeTiers is merge with tier accounting: a worker that stays but whose
// best tier changes has its blocks so far counted on its old tier.
func (a *activeSet) mergeTiers(p *setPlanes, d uint32) int {
	act, aw, mat, res, pos, lo, nw := a.act, a.aw, a.mat, a.res, a.pos, a.lo, a.nw
	src, slo, sw, off := p.bm, p.lo, p.w, &p.off
	j := 0
	for _, x := range aw {
		var o, nb [kv.NumTiers]uint64
		var oall, nall uint64
		rx := lo + x - slo // x in the set's words
		for t := range kv.NumTiers {
			o[t] = act[uint32(t)*nw+x]
			oall |= o[t]
			if rx < sw && off[t] >= 0 {
				nb[t] = src[off[t]+int32(rx)]
				nall |= nb[t]
			}
		}
		stay := oall & nall
		for t := range kv.NumTiers {
			// Leaves at depth d, or stays on another best tier.
			for mv := o[t] &^ nb[t]; mv != 0; mv &= mv - 1 {
				b := uint32(bits.TrailingZeros64(mv))
				if stay&(1<<b) == 0 {
					mat[x<<6|b] = d
					continue
				}
				r := &res[pos[x<<6|b]]
				r.byTier[t] += d - r.start
				r.start = d
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
	return j
}

// finish ends the walk at depth d: the workers still active matched d blocks.
// It leaves act zero.
func (a *activeSet) finish(d uint32) {
	act, mat, nw := a.act, a.mat, a.nw
	for _, x := range a.aw {
		for t := range kv.NumTiers {
			for o := act[uint32(t)*nw+x]; o != 0; o &= o - 1 {
				mat[x<<6|uint32(bits.TrailingZeros64(o))] = d
			}
			act[uint32(t)*nw+x] = 0
		}
	}
	a.aw = a.aw[:0]
}

// scores fills in out's scores (and the first set's slots, if still set
// aside) from where each worker left and its tier accounting, with index
// sizes from the slot directory dir.
func (a *activeSet) scores(out []Score, dir []*slotChunk) {
	fw, lo, mat, res, tiered := a.fw, a.lo, a.mat, a.res, a.tiered
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
}
