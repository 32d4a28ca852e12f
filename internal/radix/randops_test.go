package radix

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

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
		h = kv.Mix(h ^ b*0x9e3779b97f4a7c15)
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
