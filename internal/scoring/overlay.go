package scoring

import (
	"sync"
	"sync/atomic"
	"time"
)

// overlay holds the router's own predictions: right after a request is routed,
// its prompt blocks count as cached on the chosen rank until they expire or
// are evicted, so a burst sharing a new prefix lands together before the
// engine's store events arrive. Workers without events are routed from the
// overlay alone.
//
// Blocks are keyed by a chain of the prompt's block hashes (key i covers
// blocks 0..i), so a key names a position in a prefix like a tree path does.
// Each rank's predictions sit in a FIFO whose order is expiry order (one TTL
// per rank, and expiries strictly increase within a rank, so an expiry names
// one FIFO entry). A prediction is pushed last block first, so capacity
// eviction takes an old prompt's tail before its leading blocks. Re-predicting
// a key refreshes its holder and leaves a stale FIFO entry that is skipped when
// it reaches the front; the rank's live predictions (FIFO entries minus stale
// ones) are bounded by its capacity, least recently predicted out first, and a
// FIFO that reaches twice the capacity is compacted.
type overlay struct {
	mu    sync.RWMutex
	keys  map[uint64][]holder
	slots []*slotState
	free  []int32
	// present counts the keys by their low bits (keyBucket): a key whose
	// bucket counts 0 is not in keys, which extend learns without a map
	// lookup. A Route asks for every block of its prompt, mostly absent
	// ones; the counts are exact, so the answer is the map's.
	present *[1 << presentBits]uint32
}

const presentBits = 16

func keyBucket(key uint64) uint32 { return uint32(key) & (1<<presentBits - 1) }

type holder struct {
	slot int32
	// confirmed is set (atomically, under the read lock) once a match saw
	// the rank's index hold the block: the prediction has done its job, and
	// the index alone speaks for the block from then on.
	confirmed uint32
	expires   int64 // unix nanoseconds
}

type slotState struct {
	rank     *rank
	capacity int
	ttl      time.Duration
	fifo     []fifoEntry // ring buffer
	head, n  int
	stale    int   // FIFO entries whose key was re-predicted (or dropped) since
	lastExp  int64 // the latest expiry given out; the next is later
}

type fifoEntry struct {
	key     uint64
	expires int64
}

func newOverlay() *overlay {
	return &overlay{keys: make(map[uint64][]holder), present: new([1 << presentBits]uint32)}
}

// addRank allocates a slot for one rank's predictions and sets rk.slot.
func (o *overlay) addRank(rk *rank, capacity int, ttl time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := &slotState{rank: rk, capacity: capacity, ttl: ttl}
	if n := len(o.free); n > 0 {
		rk.slot = o.free[n-1]
		o.free = o.free[:n-1]
		o.slots[rk.slot] = st
		return
	}
	o.slots = append(o.slots, st)
	rk.slot = int32(len(o.slots) - 1)
}

// removeRank drops every prediction of slot and frees it.
func (o *overlay) removeRank(slot int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.slots[slot]
	for st.n > 0 {
		e := st.pop()
		o.dropHolder(e.key, slot, 0)
	}
	o.slots[slot] = nil
	o.free = append(o.free, slot)
}

func (st *slotState) pop() fifoEntry {
	e := st.fifo[st.head]
	st.head = (st.head + 1) % len(st.fifo)
	st.n--
	return e
}

func (st *slotState) push(e fifoEntry) {
	if st.n == len(st.fifo) {
		// n stays below 2*capacity+1 (predict compacts at 2*capacity).
		grown := make([]fifoEntry, min(max(16, 2*len(st.fifo)), 2*st.capacity+1))
		for i := 0; i < st.n; i++ {
			grown[i] = st.fifo[(st.head+i)%len(st.fifo)]
		}
		st.fifo, st.head = grown, 0
	}
	st.fifo[(st.head+st.n)%len(st.fifo)] = e
	st.n++
}

// dropHolder removes slot from key's holders; with expires != 0 only when the
// holder was not refreshed since (its expiry still matches). It reports whether
// it removed one. The caller holds mu.
func (o *overlay) dropHolder(key uint64, slot int32, expires int64) bool {
	hs := o.keys[key]
	for i, h := range hs {
		if h.slot != slot {
			continue
		}
		if expires != 0 && h.expires != expires {
			return false
		}
		hs[i] = hs[len(hs)-1]
		hs = hs[:len(hs)-1]
		if len(hs) == 0 {
			delete(o.keys, key)
			o.present[keyBucket(key)]--
		} else {
			o.keys[key] = hs
		}
		return true
	}
	return false
}

// popFront drops st's oldest FIFO entry and, when it is current, its holder.
// The caller holds mu.
func (o *overlay) popFront(st *slotState, slot int32) {
	e := st.pop()
	if !o.dropHolder(e.key, slot, e.expires) {
		st.stale--
	}
}

// isCurrent reports whether e is the FIFO entry of slot's holder of e.key.
func (o *overlay) isCurrent(e fifoEntry, slot int32) bool {
	for _, h := range o.keys[e.key] {
		if h.slot == slot {
			return h.expires == e.expires
		}
	}
	return false
}

// compact rewrites st's FIFO without its stale entries. The caller holds mu.
func (o *overlay) compact(st *slotState, slot int32) {
	out := make([]fifoEntry, 0, max(16, 2*(st.n-st.stale)))
	for i := 0; i < st.n; i++ {
		if e := st.fifo[(st.head+i)%len(st.fifo)]; o.isCurrent(e, slot) {
			out = append(out, e)
		}
	}
	st.fifo, st.head, st.n, st.stale = out[:cap(out)], 0, len(out), 0
}

// predict records chain keys as held by rk from now on, refreshing the ones it
// holds already. A rank removed meanwhile (its slot freed, perhaps reused by
// another rank) is ignored.
func (o *overlay) predict(rk *rank, chain []uint64, now time.Time) {
	// The lock is taken per chunk so that concurrent Routes' lookups
	// (extend) wait for one chunk at most, not for a whole long prompt.
	// Chunks go from the last block to the first, like the keys within one.
	const chunk = 64
	for end := len(chain); end > 0; end -= chunk {
		if !o.predictChunk(rk, chain[max(0, end-chunk):end], now) {
			return
		}
	}
}

// predictChunk records one chunk of predict under the lock; it reports false
// when rk has been removed.
func (o *overlay) predictChunk(rk *rank, chain []uint64, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	slot := rk.slot
	st := o.slots[slot]
	if st == nil || st.rank != rk {
		return false
	}
	nowNs := now.UnixNano()
	// Expired entries leave first: FIFO order is expiry order.
	for st.n > 0 && st.fifo[st.head].expires <= nowNs {
		o.popFront(st, slot)
	}
	exp := max(now.Add(st.ttl).UnixNano(), st.lastExp)
	// Last block first: eviction from the front then takes tails first.
	for i := len(chain) - 1; i >= 0; i-- {
		key := chain[i]
		exp++ // unique per slot: an expiry names one FIFO entry
		hs := o.keys[key]
		found := false
		for k := range hs {
			if hs[k].slot == slot {
				hs[k].expires = exp
				hs[k].confirmed = 0 // predicted again: the engine lost it
				found = true
				st.stale++ // its previous FIFO entry
				break
			}
		}
		if !found {
			if len(hs) == 0 {
				o.present[keyBucket(key)]++
			}
			o.keys[key] = append(hs, holder{slot: slot, expires: exp})
		}
		st.push(fifoEntry{key: key, expires: exp})
		for st.n-st.stale > st.capacity {
			o.popFront(st, slot)
		}
		if st.n >= 2*st.capacity {
			o.compact(st, slot)
		}
	}
	st.lastExp = exp
	return true
}

// extend raises s.depth[j] (each rank's leading matched blocks from the
// index, s.radixM[j]) with the rank's unexpired, unconfirmed predictions: a
// rank at depth i that holds key i moves to i+1. A prediction of a block the
// rank's index holds is marked confirmed and stops counting, so a later
// eviction by the engine is not hidden by it. With eventsOff, only ranks
// without events use predictions. The prompt's keys (s.prefixKeys) are
// chained only when the overlay holds a prediction. The caller holds the
// Router's read lock (rank.idx is stable).
func (o *overlay) extend(s *scratch, ranks []*rank, now time.Time, eventsOff bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if len(o.keys) == 0 || len(s.hashes) == 0 {
		return
	}
	chain, radixM, depth := s.prefixKeys(), s.radixM, s.depth
	nowNs := now.UnixNano()
	var deepest uint32
	for _, d := range depth {
		deepest = max(deepest, d)
	}
	for i, key := range chain {
		var hs []holder
		if o.present[keyBucket(key)] != 0 {
			hs = o.keys[key]
		}
		if len(hs) == 0 {
			if uint32(i) >= deepest {
				return
			}
			continue
		}
		for k := range hs {
			h := &hs[k]
			if h.expires <= nowNs {
				continue
			}
			rk := o.rankOf(h.slot, ranks)
			if rk == nil || (eventsOff && !rk.approximate) {
				continue
			}
			j := rk.idx
			if radixM[j] > uint32(i) {
				if atomic.LoadUint32(&h.confirmed) == 0 {
					atomic.StoreUint32(&h.confirmed, 1)
				}
				continue
			}
			if depth[j] == uint32(i) && atomic.LoadUint32(&h.confirmed) == 0 {
				depth[j] = uint32(i) + 1
				deepest = max(deepest, uint32(i)+1)
			}
		}
	}
}

// rankOf maps a slot to its rank when that rank is in ranks.
func (o *overlay) rankOf(slot int32, ranks []*rank) *rank {
	st := o.slots[slot]
	if st == nil || st.rank.idx >= len(ranks) || ranks[st.rank.idx] != st.rank {
		return nil
	}
	return st.rank
}
