package radix

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

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

// opGen draws random operations for the workers of one goroutine from a small
// universe of paths, so that workers share prefixes, engine hashes collide
// across workers, runs overlap, and errors of every kind occur.
type opGen struct {
	r      *rand.Rand
	ranks  []kv.WorkerRank
	salt   map[kv.WorkerRank]uint64
	maxLen int
	known  map[kv.WorkerRank][][]uint64 // paths stored before, to extend and to remove
}

// knownOrRandom returns a path w stored before (or its prefix) most of the time.
func (g *opGen) knownOrRandom(w kv.WorkerRank) []uint64 {
	if k := g.known[w]; len(k) > 0 && g.r.IntN(5) != 0 {
		p := k[g.r.IntN(len(k))]
		return p[:1+g.r.IntN(len(p))]
	}
	return randPrompt(g.r, 1+g.r.IntN(g.maxLen))
}

// prompt draws a random path of block hashes; block hashes at depth 0 vary
// more so that prompts spread over shards.
func randPrompt(r *rand.Rand, n int) []uint64 {
	p := make([]uint64, n)
	for i := range p {
		if i == 0 {
			p[i] = 100 + uint64(r.IntN(6))
		} else {
			p[i] = uint64(r.IntN(3)) + 1
		}
	}
	return p
}

// eh is the engine hash of a path on w: a hash of the path, salted per worker
// for odd ranks so that equal engine hashes on different workers mean
// different things or the same thing.
func (g *opGen) eh(w kv.WorkerRank, path []uint64) uint64 {
	h := g.salt[w]
	for _, b := range path {
		h = fmix64(h ^ b*0x9e3779b97f4a7c15)
	}
	return h % 100000
}

type randOp struct {
	kind      string
	w         kv.WorkerRank
	parent    uint64
	hasParent bool
	tier      kv.Tier
	blocks    []kv.Block
	hashes    []uint64
	path      []uint64 // a store's whole path
}

// learn remembers the path of a successful store.
func (g *opGen) learn(op randOp, err error) {
	if g.known == nil {
		g.known = make(map[kv.WorkerRank][][]uint64)
	}
	switch {
	case op.kind == "clear":
		delete(g.known, op.w)
	case op.kind == "removeworker":
		for w := range g.known {
			if w.ID == op.w.ID {
				delete(g.known, w)
			}
		}
	case op.kind == "store" && err == nil:
		if k := g.known[op.w]; len(k) < 64 {
			g.known[op.w] = append(k, op.path)
		} else {
			k[g.r.IntN(len(k))] = op.path
		}
	}
}

func (o randOp) String() string {
	return fmt.Sprintf("%s %s parent=%v/%#x tier=%d blocks=%v hashes=%v", o.kind, o.w, o.hasParent, o.parent, o.tier, o.blocks, o.hashes)
}

func (g *opGen) randTier() kv.Tier {
	if g.r.IntN(3) == 0 {
		return kv.Tier(g.r.IntN(int(kv.NumTiers)))
	}
	return kv.TierDevice
}

func (g *opGen) next() randOp {
	r := g.r
	w := g.ranks[r.IntN(len(g.ranks))]
	op := randOp{w: w, tier: g.randTier()}
	p := randPrompt(r, 1+r.IntN(g.maxLen))
	n := r.IntN(100)
	switch {
	case n < 55:
		op.kind = "store"
		s := 0
		switch k := r.IntN(10); {
		case k < 5 && len(g.known[w]) > 0:
			base := g.knownOrRandom(w)
			p = append(slices.Clone(base), randPrompt(r, 2+r.IntN(3))[1:]...)
			s = len(base)
		case k < 8:
			s = r.IntN(len(p))
		}
		op.path = p
		if s > 0 {
			op.hasParent, op.parent = true, g.eh(w, p[:s])
		}
		for i := s; i < len(p); i++ {
			op.blocks = append(op.blocks, kv.Block{EngineHash: g.eh(w, p[:i+1]), BlockHash: p[i]})
		}
		switch k := r.IntN(40); {
		case k == 0 && len(op.blocks) > 1: // repeat an engine hash
			op.blocks[len(op.blocks)-1].EngineHash = op.blocks[0].EngineHash
		case k == 1 && op.hasParent: // name its own parent
			op.blocks[0].EngineHash = op.parent
		case k == 2: // unknown parent
			op.hasParent, op.parent = true, 100000+uint64(r.IntN(10))
		case k < 6: // an engine hash bound elsewhere: rebinds and aliases
			op.blocks[r.IntN(len(op.blocks))].EngineHash = g.eh(w, randPrompt(r, 1+r.IntN(g.maxLen)))
		case k == 6:
			op.tier = kv.NumTiers + 1
		}
	case n < 65:
		op.kind = "storetier"
		op.hashes = g.someHashes(w)
	case n < 96:
		op.kind = "remove"
		op.hashes = g.someHashes(w)
		if r.IntN(2) == 0 {
			op.tier = kv.TierDevice
		}
		if r.IntN(50) == 0 {
			op.tier = kv.NumTiers
		}
	case n < 98:
		op.kind = "clear"
	default:
		op.kind = "removeworker"
	}
	return op
}

func (g *opGen) someHashes(w kv.WorkerRank) []uint64 {
	var hs []uint64
	for range 1 + g.r.IntN(4) {
		hs = append(hs, g.eh(w, g.knownOrRandom(w)))
	}
	return hs
}

// apply runs op on both and reports a mismatch of their errors.
func applyBoth(ix *Index, m *refModel, op randOp) error {
	var e1, e2 error
	switch op.kind {
	case "store":
		e1 = ix.Store(op.w, op.parent, op.hasParent, op.tier, op.blocks)
		e2 = m.Store(op.w, op.parent, op.hasParent, op.tier, op.blocks)
	case "storetier":
		e1 = ix.StoreTier(op.w, op.hashes, op.tier)
		e2 = m.StoreTier(op.w, op.hashes, op.tier)
	case "remove":
		e1 = ix.Remove(op.w, op.hashes, op.tier)
		e2 = m.Remove(op.w, op.hashes, op.tier)
	case "clear":
		ix.Clear(op.w)
		m.Clear(op.w)
	case "removeworker":
		ix.RemoveWorker(op.w.ID)
		m.RemoveWorker(op.w.ID)
	}
	if (e1 == nil) != (e2 == nil) || (e2 != nil && !errors.Is(e1, e2)) {
		return fmt.Errorf("%v: index error %v, model error %v", op, e1, e2)
	}
	if e2 != nil {
		return fmt.Errorf("%w: %w", errModel, e2)
	}
	return nil
}

// errModel wraps an error both the index and the model returned.
var errModel = errors.New("both")

// compareAll checks every match over prompts, every worker's Cached, Workers,
// Stats and the index's invariants.
func compareAll(t *testing.T, ix *Index, m *refModel, prompts [][]uint64, workers []kv.WorkerRank) {
	t.Helper()
	if err := ix.CheckInvariants(); err != nil {
		t.Fatalf("invariants: %v", err)
	}
	var buf []Score
	slotOf := map[kv.WorkerRank]uint32{}
	workerOf := map[uint32]kv.WorkerRank{}
	for _, p := range prompts {
		buf = ix.Match(p, buf)
		got := nameScores(ix, buf)
		// Each worker/rank has one slot, and no two share one.
		for _, sc := range got {
			if sc.Worker == (kv.WorkerRank{}) {
				t.Fatalf("slot %d names no worker", sc.Slot)
			}
			if s, ok := slotOf[sc.Worker]; ok && s != sc.Slot {
				t.Fatalf("%s has slots %d and %d", sc.Worker, s, sc.Slot)
			}
			if w, ok := workerOf[sc.Slot]; ok && w != sc.Worker {
				t.Fatalf("slot %d names %s and %s", sc.Slot, w, sc.Worker)
			}
			slotOf[sc.Worker], workerOf[sc.Slot] = sc.Slot, sc.Worker
		}
		sortScores(got)
		want := m.Match(p)
		if !slices.Equal(got, want) {
			t.Fatalf("match %v:\n got %v\nwant %v", p, got, want)
		}
	}
	for _, w := range workers {
		if g, wnt := ix.Cached(w), m.Cached(w); g != wnt {
			t.Fatalf("cached %s: got %d want %d", w, g, wnt)
		}
	}
	if g, w := ix.Workers(), m.Workers(); !slices.Equal(g, w) {
		t.Fatalf("workers: got %v want %v", g, w)
	}
	if g, w := ix.Stats(), m.Stats(); g != w {
		t.Fatalf("stats:\n got %+v\nwant %+v", g, w)
	}
}

// checkScoreSanity checks what must hold of any match, even one racing writers.
func checkScoreSanity(p []uint64, scores []Score) error {
	seen := map[uint32]bool{}
	for _, s := range scores {
		if seen[s.Slot] {
			return fmt.Errorf("match %v: slot %d scored twice", p, s.Slot)
		}
		seen[s.Slot] = true
		var sum uint32
		for _, n := range s.ByTier {
			sum += n
		}
		if s.Matched < 1 || int(s.Matched) > len(p) || sum != s.Matched {
			return fmt.Errorf("match %v: bad score %+v", p, s)
		}
	}
	return nil
}

func TestRandomSequential(t *testing.T) {
	for seed := range uint64(4) {
		// Short segments make most paths cross shards (1: segments start at
		// depths 1, 2, 4 and 8); the default keeps these paths in one.
		seg := []int{1, 2, 3, 0}[seed]
		t.Run(fmt.Sprintf("seed=%d/segment=%d", seed, seg), func(t *testing.T) {
			ix := New(Config{Shards: 4, SegmentBlocks: seg, CheckInvariants: true})
			m := newRefModel(ix.segmentStart)
			r := rand.New(rand.NewPCG(seed, 7))
			g := &opGen{r: r, salt: map[kv.WorkerRank]uint64{}, maxLen: 6}
			for i := range 3 {
				for rank := range 2 {
					w := kv.WorkerRank{ID: fmt.Sprintf("w%d", i), DPRank: uint32(rank)}
					g.ranks = append(g.ranks, w)
					if i%2 == 1 {
						g.salt[w] = uint64(i*10 + rank + 1)
					}
				}
			}
			prompts := make([][]uint64, 100)
			for i := range prompts {
				prompts[i] = randPrompt(r, 1+r.IntN(8))
			}
			for i := range 1500 {
				op := g.next()
				err := applyBoth(ix, m, op)
				if err != nil && !errors.Is(err, errModel) {
					t.Fatalf("op %d: %v", i, err)
				}
				g.learn(op, err)
				if i%100 == 99 {
					compareAll(t, ix, m, prompts, g.ranks)
				}
			}
			compareAll(t, ix, m, prompts, g.ranks)
			t.Logf("stats %+v", ix.Stats())
		})
	}
}

// TestRandomConcurrent drives the index and the model with the same random
// operations from one goroutine per worker (two ranks each), while matchers
// run concurrently and check what must hold of any result. At each quiescent
// point between rounds every match, Cached, Workers and Stats must equal the
// model's, and the invariants must hold.
func TestRandomConcurrent(t *testing.T) {
	const (
		writers = 8
		rounds  = 8
		ops     = 250
	)
	ix := New(Config{Shards: 8, SegmentBlocks: 2}) // (paths cross segments)
	m := newRefModel(ix.segmentStart)
	r := rand.New(rand.NewPCG(42, 42))
	prompts := make([][]uint64, 200)
	for i := range prompts {
		prompts[i] = randPrompt(r, 1+r.IntN(10))
	}
	gens := make([]*opGen, writers)
	var all []kv.WorkerRank
	for i := range gens {
		g := &opGen{r: rand.New(rand.NewPCG(uint64(i), 99)), salt: map[kv.WorkerRank]uint64{}, maxLen: 8}
		for rank := range 2 {
			w := kv.WorkerRank{ID: fmt.Sprintf("w%02d", i), DPRank: uint32(rank)}
			g.ranks = append(g.ranks, w)
			all = append(all, w)
			if i%2 == 1 {
				g.salt[w] = uint64(i*10 + rank + 1)
			}
		}
		gens[i] = g
	}
	for round := range rounds {
		var wg sync.WaitGroup
		errc := make(chan error, writers+4)
		stop := make(chan struct{})
		var mwg sync.WaitGroup
		for mi := range 3 {
			mwg.Add(1)
			go func() {
				defer mwg.Done()
				var buf []Score
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					p := prompts[(i*7+mi)%len(prompts)]
					buf = ix.Match(p, buf)
					if err := checkScoreSanity(p, buf); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
		for _, g := range gens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range ops {
					op := g.next()
					err := applyBoth(ix, m, op)
					if err != nil && !errors.Is(err, errModel) {
						errc <- err
						return
					}
					g.learn(op, err)
				}
			}()
		}
		wg.Wait()
		close(stop)
		mwg.Wait()
		select {
		case err := <-errc:
			t.Fatalf("round %d: %v", round, err)
		default:
		}
		// Quiescent: compare everything, with matchers racing each other.
		var cwg sync.WaitGroup
		for mi := range 4 {
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				var buf []Score
				for i := mi; i < len(prompts); i += 4 {
					buf = ix.Match(prompts[i], buf)
					got := nameScores(ix, buf)
					sortScores(got)
					if want := m.Match(prompts[i]); !slices.Equal(got, want) {
						errc <- fmt.Errorf("match %v:\n got %v\nwant %v", prompts[i], got, want)
						return
					}
				}
			}()
		}
		cwg.Wait()
		select {
		case err := <-errc:
			t.Fatalf("round %d: %v", round, err)
		default:
		}
		compareAll(t, ix, m, prompts, all)
	}
	// The whole fleet leaves: nothing may remain.
	for _, w := range all {
		ix.RemoveWorker(w.ID)
		m.RemoveWorker(w.ID)
	}
	compareAll(t, ix, m, prompts, all)
	if st := ix.Stats(); st.Nodes != 0 || st.Residencies != 0 {
		t.Fatalf("after removing every worker: %+v", st)
	}
}

// TestRandomWideFleet checks Match against the model where holder sets are
// large (many workers on one long shared path, each with random holes, tier
// changes and re-stores), so that Match intersects bitmaps of many words:
// sets with bitmaps and without, holders whose slots start past the first
// word (idle workers registered before them), and slots so sparse that sets
// get no bitmaps.
func TestRandomWideFleet(t *testing.T) {
	for _, tc := range []struct {
		name            string
		workers, idle   int // holders of the path; idle workers registered before each
		idleEvery, seed int // every idleEvery-th holder
	}{
		{"dense", 120, 0, 1, 9},
		{"offset", 300, 130, 1000, 10},
		{"mixed", 200, 40, 7, 11},
		{"sparse", 24, 150, 1, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := wideFleet(t, tc.workers, tc.idle, tc.idleEvery, uint64(tc.seed))
			with, without := setsByBitmaps(ix)
			if sparse := tc.name == "sparse"; sparse && (with != 0 || without == 0) || !sparse && with == 0 {
				t.Fatalf("%d sets of %d+ entries with bitmaps, %d without", with, bitsMinEntries, without)
			}
		})
	}
}

// setsByBitmaps counts the sets of bitsMinEntries or more entries with and
// without bitmaps.
func setsByBitmaps(ix *Index) (with, without int) {
	for _, sh := range ix.shards {
		for _, hs := range sh.sets {
			if len(hs.bits.bm) > 0 {
				with++
			} else if hs.bits.n >= bitsMinEntries {
				without++
			}
		}
	}
	return with, without
}

func wideFleet(t *testing.T, workers, idle, idleEvery int, seed uint64) *Index {
	const depth = 100
	ix := New(Config{Shards: 2})
	m := newRefModel(ix.segmentStart)
	r := rand.New(rand.NewPCG(seed, 9))
	path := make([]uint64, depth)
	for i := range path {
		path[i] = uint64(1000 + i)
	}
	var all []kv.WorkerRank
	eh := func(w, i int) uint64 { return uint64(w)<<32 | uint64(i+1) }
	for wi := range workers {
		if wi%idleEvery == 0 {
			for j := range idle {
				w := kv.WorkerRank{ID: fmt.Sprintf("idle%03d-%03d", wi, j)}
				all = append(all, w)
				// (A block of its own: the holder sets stay the path's.)
				op := randOp{kind: "store", w: w, blocks: []kv.Block{{EngineHash: 1, BlockHash: 1<<40 + uint64(len(all))}}}
				if err := applyBoth(ix, m, op); err != nil {
					t.Fatal(err)
				}
			}
		}
		w := kv.WorkerRank{ID: fmt.Sprintf("w%03d", wi)}
		all = append(all, w)
		n := depth - r.IntN(depth/2)*r.IntN(2)
		var blocks []kv.Block
		for i := range n {
			blocks = append(blocks, kv.Block{EngineHash: eh(wi, i), BlockHash: path[i]})
		}
		if err := applyBoth(ix, m, randOp{kind: "store", w: w, blocks: blocks}); err != nil {
			t.Fatal(err)
		}
	}
	prompts := [][]uint64{path, path[:depth/2], append(slices.Clone(path[:depth-1]), 5)}
	holders := slices.DeleteFunc(slices.Clone(all), func(w kv.WorkerRank) bool { return strings.HasPrefix(w.ID, "idle") })
	for round := range 30 {
		for range 40 {
			wi := r.IntN(workers)
			w := holders[wi]
			i := r.IntN(depth)
			if r.IntN(8) == 0 { // the first node: Match starts from its set's tiers
				i = 0
			}
			var op randOp
			switch r.IntN(4) {
			case 0:
				op = randOp{kind: "remove", w: w, tier: kv.TierDevice, hashes: []uint64{eh(wi, i)}}
			case 1:
				op = randOp{kind: "storetier", w: w, tier: kv.TierHost, hashes: []uint64{eh(wi, i), eh(wi, i+1)}}
			case 2:
				if i == 0 {
					continue
				}
				op = randOp{kind: "store", w: w, hasParent: true, parent: eh(wi, i-1),
					blocks: []kv.Block{{EngineHash: eh(wi, i), BlockHash: path[i]}}}
			case 3:
				op = randOp{kind: "remove", w: w, tier: kv.TierHost, hashes: []uint64{eh(wi, i)}}
			}
			if err := applyBoth(ix, m, op); err != nil && !errors.Is(err, errModel) {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		compareAll(t, ix, m, prompts, all)
	}
	return ix
}

// TestMatchFirstSetTiers starts Match at a set kept as bitmaps whose holders
// have different best tiers: workers that hold the first block only on the
// host tier, some of them through the whole prompt and some leaving after the
// first block, each of which keeps its first tier to the end of its score.
func TestMatchFirstSetTiers(t *testing.T) {
	ix := New(Config{})
	m := newRefModel(ix.segmentStart)
	var all []kv.WorkerRank
	for wi := range 40 {
		w := kv.WorkerRank{ID: fmt.Sprintf("w%02d", wi)}
		all = append(all, w)
		ops := []randOp{{kind: "store", w: w, blocks: []kv.Block{{EngineHash: 1, BlockHash: 100}, {EngineHash: 2, BlockHash: 101}}}}
		switch {
		case wi < 10: // host only, both blocks
			ops = append(ops,
				randOp{kind: "storetier", w: w, tier: kv.TierHost, hashes: []uint64{1, 2}},
				randOp{kind: "remove", w: w, tier: kv.TierDevice, hashes: []uint64{1, 2}})
		case wi < 15: // host only, the first block
			ops = append(ops,
				randOp{kind: "storetier", w: w, tier: kv.TierHost, hashes: []uint64{1}},
				randOp{kind: "remove", w: w, tier: kv.TierDevice, hashes: []uint64{1, 2}})
		case wi < 20: // device and host (not a plain entry), the first block
			ops = append(ops,
				randOp{kind: "storetier", w: w, tier: kv.TierHost, hashes: []uint64{1}},
				randOp{kind: "remove", w: w, tier: kv.TierDevice, hashes: []uint64{2}})
		}
		for _, op := range ops {
			if err := applyBoth(ix, m, op); err != nil {
				t.Fatal(err)
			}
		}
	}
	sh := ix.shards[ix.rootShard(100)]
	id, _ := sh.lookup(rootID, pathKey(rootKey, 100))
	if fs := &sh.sets[sh.meta(id).set]; fs.bits.bm == nil || fs.bits.tiers != 1<<kv.TierDevice|1<<kv.TierHost || len(fs.e) != 5 {
		t.Fatalf("first set: bitmaps %v, tiers %b, %d entries not plain; want bitmaps of 2 tiers and 5", fs.bits.bm != nil, fs.bits.tiers, len(fs.e))
	}
	compareAll(t, ix, m, [][]uint64{{100}, {100, 101}, {100, 101, 102}}, all)
}
