package radix

import (
	"sync"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// baseline is the naive design the index is measured against, in the style of
// the map-of-sets indexes in prior art: one RWMutex over a map from chained
// prefix hash to the set of workers holding it, plus each worker's map from
// engine hash to prefix hash. Match intersects the active workers with the
// holders at every depth. It ignores tiers and copies.
type baseline struct {
	mu      sync.RWMutex
	nodes   map[uint64]map[int32]struct{}
	workers []map[uint64]uint64
}

func newBaseline(n int) *baseline {
	b := &baseline{nodes: make(map[uint64]map[int32]struct{}), workers: make([]map[uint64]uint64, n)}
	for i := range b.workers {
		b.workers[i] = make(map[uint64]uint64)
	}
	return b
}

func (b *baseline) store(w int32, parent uint64, hasParent bool, blocks []kv.Block) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	wm := b.workers[w]
	var key uint64 = rootKey
	if hasParent {
		k, ok := wm[parent]
		if !ok {
			return false
		}
		key = k
	}
	for _, bl := range blocks {
		key = pathKey(key, bl.BlockHash)
		set := b.nodes[key]
		if set == nil {
			set = make(map[int32]struct{}, 1)
			b.nodes[key] = set
		}
		set[w] = struct{}{}
		wm[bl.EngineHash] = key
	}
	return true
}

func (b *baseline) remove(w int32, hashes []uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wm := b.workers[w]
	for _, eh := range hashes {
		key, ok := wm[eh]
		if !ok {
			continue
		}
		delete(wm, eh)
		if set := b.nodes[key]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(b.nodes, key)
			}
		}
	}
}

type baseScore struct {
	w       int32
	matched uint32
}

// match returns each worker holding the first block with its matched depth.
func (b *baseline) match(hs []uint64, out []baseScore, active []int32) ([]baseScore, []int32) {
	out, active = out[:0], active[:0]
	b.mu.RLock()
	defer b.mu.RUnlock()
	key := uint64(rootKey)
	for d, h := range hs {
		key = pathKey(key, h)
		set := b.nodes[key]
		if d == 0 {
			for w := range set {
				active = append(active, w)
			}
			continue
		}
		j := 0
		for _, w := range active {
			if _, ok := set[w]; ok {
				active[j] = w
				j++
			} else {
				out = append(out, baseScore{w, uint32(d)})
			}
		}
		active = active[:j]
		if j == 0 {
			break
		}
	}
	for _, w := range active {
		out = append(out, baseScore{w, uint32(len(hs))})
	}
	return out, active
}

func (b *baseline) apply(log *wlLog) {
	for i := range log.ev {
		e := &log.ev[i]
		if e.remove {
			b.remove(e.w, e.hashes)
		} else {
			b.store(e.w, e.parent, e.hasParent, e.blocks)
		}
	}
}
