package scoring

import (
	"sync"
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
// per rank); re-predicting a key refreshes its holder and leaves a stale FIFO
// entry that is skipped when it reaches the front. The FIFO's length bounds
// the rank's predictions (LRU by insertion).
type overlay struct {
	mu    sync.RWMutex
	keys  map[uint64][]holder
	slots []*slotState
	free  []int32
}

type holder struct {
	slot    int32
	expires int64 // unix nanoseconds
}

type slotState struct {
	rank     *rank
	capacity int
	ttl      time.Duration
	fifo     []fifoEntry // ring buffer
	head, n  int
}

type fifoEntry struct {
	key     uint64
	expires int64
}

func newOverlay() *overlay {
	return &overlay{keys: make(map[uint64][]holder)}
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
		grown := make([]fifoEntry, max(16, min(2*len(st.fifo), st.capacity+1)))
		for i := 0; i < st.n; i++ {
			grown[i] = st.fifo[(st.head+i)%len(st.fifo)]
		}
		st.fifo, st.head = grown, 0
	}
	st.fifo[(st.head+st.n)%len(st.fifo)] = e
	st.n++
}

// dropHolder removes slot from key's holders; with expires != 0 only when the
// holder was not refreshed since (its expiry still matches). The caller holds mu.
func (o *overlay) dropHolder(key uint64, slot int32, expires int64) {
	hs := o.keys[key]
	for i, h := range hs {
		if h.slot != slot {
			continue
		}
		if expires != 0 && h.expires != expires {
			return
		}
		hs[i] = hs[len(hs)-1]
		hs = hs[:len(hs)-1]
		if len(hs) == 0 {
			delete(o.keys, key)
		} else {
			o.keys[key] = hs
		}
		return
	}
}

// predict records chain keys as held by slot from now on.
func (o *overlay) predict(slot int32, chain []uint64, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.slots[slot]
	if st == nil {
		return
	}
	nowNs := now.UnixNano()
	// Expired entries leave first: FIFO order is expiry order.
	for st.n > 0 && st.fifo[st.head].expires <= nowNs {
		e := st.pop()
		o.dropHolder(e.key, slot, e.expires)
	}
	exp := now.Add(st.ttl).UnixNano()
	for _, key := range chain {
		hs := o.keys[key]
		found := false
		for i := range hs {
			if hs[i].slot == slot {
				hs[i].expires = exp
				found = true
				break
			}
		}
		if !found {
			o.keys[key] = append(hs, holder{slot: slot, expires: exp})
		}
		st.push(fifoEntry{key: key, expires: exp})
		for st.n > st.capacity {
			e := st.pop()
			o.dropHolder(e.key, slot, e.expires)
		}
	}
}

// extend raises depth[j] (each rank's leading matched blocks from the index)
// with the rank's unexpired predictions: a rank at depth i that holds key i
// moves to i+1. With eventsOff, only ranks without events use predictions.
// The caller holds the Router's read lock (rank.idx is stable).
func (o *overlay) extend(chain []uint64, ranks []*rank, depth []uint32, now time.Time, eventsOff bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if len(o.keys) == 0 {
		return
	}
	nowNs := now.UnixNano()
	var deepest uint32
	for _, d := range depth {
		deepest = max(deepest, d)
	}
	for i, key := range chain {
		hs := o.keys[key]
		if len(hs) == 0 {
			if uint32(i) >= deepest {
				return
			}
			continue
		}
		for _, h := range hs {
			if h.expires <= nowNs {
				continue
			}
			rk := o.rankOf(h.slot, ranks)
			if rk == nil || (eventsOff && !rk.approximate) {
				continue
			}
			if depth[rk.idx] == uint32(i) {
				depth[rk.idx] = uint32(i) + 1
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
