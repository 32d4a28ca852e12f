package radix

import (
	"encoding/binary"
	"sort"
	"sync"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// refModel is a deliberately naive reference for Index: every worker's engine
// hashes map to full token paths (strings of block hashes), and every path maps
// to the set of workers holding it with per-tier counts. It follows the same
// rules and counts the same things, with no sharing, sharding or cleverness.
type refModel struct {
	mu      sync.Mutex
	binds   map[kv.WorkerRank]map[uint64]*refBind
	held    map[string]map[kv.WorkerRank]*[kv.NumTiers]int
	st      Stats
	touched map[kv.WorkerRank]bool
	// segmentStart is the index's rule for where a path segment starts: a
	// node of the index lives while it is held or has a held descendant in
	// its segment.
	segmentStart func(depth uint32) bool
}

type refBind struct {
	path   string
	copies [kv.NumTiers]int
}

func newRefModel(segmentStart func(depth uint32) bool) *refModel {
	return &refModel{
		binds:        make(map[kv.WorkerRank]map[uint64]*refBind),
		held:         make(map[string]map[kv.WorkerRank]*[kv.NumTiers]int),
		touched:      make(map[kv.WorkerRank]bool),
		segmentStart: segmentStart,
	}
}

func pathAppend(p string, h uint64) string {
	return p + string(binary.LittleEndian.AppendUint64(nil, h))
}

func (m *refModel) hold(w kv.WorkerRank, path string, t kv.Tier, d int) {
	hs := m.held[path]
	if hs == nil {
		hs = make(map[kv.WorkerRank]*[kv.NumTiers]int)
		m.held[path] = hs
	}
	c := hs[w]
	if c == nil {
		c = new([kv.NumTiers]int)
		hs[w] = c
	}
	c[t] += d
	if *c == ([kv.NumTiers]int{}) {
		delete(hs, w)
		if len(hs) == 0 {
			delete(m.held, path)
		}
	}
}

func (m *refModel) drop(w kv.WorkerRank, b *refBind) {
	for t := kv.Tier(0); t < kv.NumTiers; t++ {
		if b.copies[t] > 0 {
			m.hold(w, b.path, t, -1)
		}
	}
}

func (m *refModel) Store(w kv.WorkerRank, parent uint64, hasParent bool, tier kv.Tier, blocks []kv.Block) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touched[w] = true
	if tier >= kv.NumTiers {
		m.st.Invalid++
		return ErrInvalid
	}
	if len(blocks) == 0 {
		m.st.Stores++
		return nil
	}
	seen := map[uint64]bool{}
	for _, b := range blocks {
		if seen[b.EngineHash] || (hasParent && b.EngineHash == parent) {
			m.st.Invalid++
			return ErrInvalid
		}
		seen[b.EngineHash] = true
	}
	bs := m.binds[w]
	if bs == nil {
		bs = make(map[uint64]*refBind)
		m.binds[w] = bs
	}
	path := ""
	if hasParent {
		p, ok := bs[parent]
		if !ok {
			m.st.ParentNotFound++
			return ErrParentNotFound
		}
		path = p.path
	}
	for _, bl := range blocks {
		path = pathAppend(path, bl.BlockHash)
		b := bs[bl.EngineHash]
		if b != nil && b.path == path {
			if b.copies[tier] > 0 {
				m.st.DuplicateStore++
			} else {
				m.hold(w, path, tier, +1)
			}
			b.copies[tier]++
			continue
		}
		if b != nil {
			m.drop(w, b)
		}
		nb := &refBind{path: path}
		nb.copies[tier] = 1
		bs[bl.EngineHash] = nb
		m.hold(w, path, tier, +1)
	}
	m.st.Stores++
	m.st.BlocksStored += uint64(len(blocks))
	return nil
}

func (m *refModel) update(w kv.WorkerRank, hashes []uint64, tier kv.Tier, dir int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touched[w] = true
	if tier >= kv.NumTiers {
		m.st.BlockNotFound += uint64(len(hashes))
		return ErrBlockNotFound
	}
	if dir < 0 {
		m.st.Removes++
	}
	bs := m.binds[w]
	missing := 0
	for _, eh := range hashes {
		b := bs[eh]
		if b == nil || (dir < 0 && b.copies[tier] == 0) {
			missing++
			continue
		}
		if dir > 0 {
			m.st.BlocksStored++
			if b.copies[tier] > 0 {
				m.st.DuplicateStore++
			} else {
				m.hold(w, b.path, tier, +1)
			}
			b.copies[tier]++
			continue
		}
		m.st.BlocksRemoved++
		b.copies[tier]--
		if b.copies[tier] == 0 {
			m.hold(w, b.path, tier, -1)
			if b.copies == ([kv.NumTiers]int{}) {
				delete(bs, eh)
			}
		}
	}
	if missing > 0 {
		m.st.BlockNotFound += uint64(missing)
		return ErrBlockNotFound
	}
	return nil
}

func (m *refModel) StoreTier(w kv.WorkerRank, hs []uint64, t kv.Tier) error {
	return m.update(w, hs, t, +1)
}
func (m *refModel) Remove(w kv.WorkerRank, hs []uint64, t kv.Tier) error {
	return m.update(w, hs, t, -1)
}

func (m *refModel) clearLocked(w kv.WorkerRank) {
	for _, b := range m.binds[w] {
		m.drop(w, b)
	}
	delete(m.binds, w)
}

func (m *refModel) Clear(w kv.WorkerRank) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clearLocked(w)
}

func (m *refModel) RemoveWorker(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for w := range m.binds {
		if w.ID == id {
			m.clearLocked(w)
		}
	}
}

// Match scores workers one by one, depth by depth. Scores are sorted by worker.
func (m *refModel) Match(hs []uint64) []named {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []named
	if len(hs) == 0 {
		return out
	}
	for w := range m.held[pathAppend("", hs[0])] {
		s := named{Worker: w, Score: Score{Cached: uint64(len(m.binds[w]))}}
		path := ""
		for _, h := range hs {
			path = pathAppend(path, h)
			c := m.held[path][w]
			if c == nil {
				break
			}
			s.Matched++
			for t := range c {
				if c[t] > 0 {
					s.ByTier[t]++
					break
				}
			}
		}
		out = append(out, s)
	}
	sortScores(out)
	return out
}

func (m *refModel) Cached(w kv.WorkerRank) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return uint64(len(m.binds[w]))
}

func (m *refModel) Workers() []kv.WorkerRank {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []kv.WorkerRank
	for w, bs := range m.binds {
		if len(bs) > 0 {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return workerLess(out[i], out[j]) })
	return out
}

// Stats counts nodes as every held path and each of its prefixes back to the
// start of its segment.
func (m *refModel) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.st
	nodes := map[string]bool{}
	for p := range m.held {
		for l := len(p) / 8; l > 0; l-- {
			nodes[p[:8*l]] = true
			if m.segmentStart(uint32(l - 1)) {
				break
			}
		}
	}
	st.Nodes = uint64(len(nodes))
	for _, bs := range m.binds {
		st.Residencies += uint64(len(bs))
	}
	return st
}

func workerLess(a, b kv.WorkerRank) bool {
	if a.ID != b.ID {
		return a.ID < b.ID
	}
	return a.DPRank < b.DPRank
}

// named is a Score with the name of its worker/rank, as tests compare them.
type named struct {
	Worker kv.WorkerRank
	Score
}

// nameScores names scores by ix.WorkerOf (an unknown slot names nobody).
func nameScores(ix *Index, scores []Score) []named {
	out := make([]named, len(scores))
	for i, s := range scores {
		out[i].Worker, _ = ix.WorkerOf(s.Slot)
		out[i].Score = s
	}
	return out
}

// sortScores orders scores by worker and zeroes their slots, which the model
// does not have (compareAll checks them).
func sortScores(s []named) {
	sort.Slice(s, func(i, j int) bool { return workerLess(s[i].Worker, s[j].Worker) })
	for i := range s {
		s[i].Slot = 0
	}
}
