package radix

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// recorded is an export kept in memory, rank by rank.
type recorded struct {
	g     Geometry
	ranks []kv.WorkerRank
	nodes [][]recNode
	binds [][]recBinding
}

type recNode struct {
	ref, parent, shard uint32
	key                uint64
	depth              uint32
}

type recBinding struct {
	eh     uint64
	ref    uint32
	copies [kv.NumTiers]uint8
}

type recSink struct {
	r *recorded
	i int
}

func (s *recSink) Node(ref, parent, shard uint32, key uint64, depth uint32) error {
	s.r.nodes[s.i] = append(s.r.nodes[s.i], recNode{ref, parent, shard, key, depth})
	return nil
}

func (s *recSink) Binding(eh uint64, ref uint32, copies [kv.NumTiers]uint8) error {
	s.r.binds[s.i] = append(s.r.binds[s.i], recBinding{eh, ref, copies})
	return nil
}

func export(t *testing.T, ix *Index) *recorded {
	t.Helper()
	e := ix.NewExporter()
	r := &recorded{g: ix.Geometry(), ranks: e.Ranks()}
	r.nodes = make([][]recNode, len(r.ranks))
	r.binds = make([][]recBinding, len(r.ranks))
	for i, w := range r.ranks {
		if err := e.Rank(w, &recSink{r, i}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func importRecorded(cfg Config, r *recorded) (*Index, error) {
	im, err := NewImporter(cfg, r.g)
	if err != nil {
		return nil, err
	}
	for i, w := range r.ranks {
		for _, n := range r.nodes[i] {
			if err := im.Node(n.ref, n.parent, n.shard, n.key, n.depth); err != nil {
				return nil, err
			}
		}
		if err := im.Rank(w); err != nil {
			return nil, err
		}
		for _, b := range r.binds[i] {
			if err := im.Binding(b.eh, b.ref, b.copies); err != nil {
				return nil, err
			}
		}
	}
	return im.Finish()
}

// TestExportImport exports a randomly built index at many points, imports it
// into a new index, and checks that the copy matches every prompt as the
// original does and then goes on exactly as the original under the same
// operations (so every engine hash's node and copy counts came back, not
// only what Match shows).
func TestExportImport(t *testing.T) {
	for seed := range uint64(4) {
		seg := []int{1, 2, 3, 0}[seed]
		t.Run(fmt.Sprintf("seed=%d/segment=%d", seed, seg), func(t *testing.T) {
			cfg := Config{Shards: 4, SegmentBlocks: seg, CheckInvariants: true}
			ix := New(cfg)
			m := newRefModel(ix.segmentStart)
			r := rand.New(rand.NewPCG(seed, 11))
			g := &opGen{r: r, salt: map[kv.WorkerRank]uint64{}, maxLen: 6}
			for i := range 3 {
				for rank := range 2 {
					g.ranks = append(g.ranks, kv.WorkerRank{ID: fmt.Sprintf("w%d", i), DPRank: uint32(rank)})
				}
			}
			prompts := make([][]uint64, 100)
			for i := range prompts {
				prompts[i] = randPrompt(r, 1+r.IntN(8))
			}
			for round := range 6 {
				for range 300 {
					op := g.next()
					err := applyBoth(ix, m, op)
					if err != nil && !errors.Is(err, errModel) {
						t.Fatal(err)
					}
					g.learn(op, err)
				}
				rec := export(t, ix)
				cp, err := importRecorded(cfg, rec)
				if err != nil {
					t.Fatalf("round %d: import: %v", round, err)
				}
				// The model's counters count operations the copy never
				// saw; the copy replaces the original from here on.
				m.resetCounters()
				compareAll(t, cp, m, prompts, g.ranks)
				ix = cp
			}
		})
	}
}

// TestImportRejects feeds records no export writes; each must fail the
// import with ErrBadExport, never panic or leave a broken index behind.
func TestImportRejects(t *testing.T) {
	cfg := Config{Shards: 4, SegmentBlocks: 2, CheckInvariants: true}
	ix := New(cfg)
	w := kv.WorkerRank{ID: "w"}
	blocks := []kv.Block{{EngineHash: 1, BlockHash: 10}, {EngineHash: 2, BlockHash: 20}, {EngineHash: 3, BlockHash: 30}}
	if err := ix.Store(w, 0, false, kv.TierDevice, blocks); err != nil {
		t.Fatal(err)
	}
	good := export(t, ix)
	if len(good.nodes[0]) != 3 || len(good.binds[0]) != 3 {
		t.Fatalf("export of 3 blocks: %d nodes, %d bindings", len(good.nodes[0]), len(good.binds[0]))
	}
	clone := func() *recorded {
		c := *good
		c.nodes = [][]recNode{slices.Clone(good.nodes[0])}
		c.binds = [][]recBinding{slices.Clone(good.binds[0])}
		return &c
	}
	for _, tc := range []struct {
		name string
		mut  func(r *recorded)
	}{
		{"ref out of order", func(r *recorded) { r.nodes[0][1].ref = 7 }},
		{"parent after child", func(r *recorded) { r.nodes[0][1].parent = 2 }},
		{"wrong depth", func(r *recorded) { r.nodes[0][1].depth = 5 }},
		{"wrong shard", func(r *recorded) { r.nodes[0][0].shard = (r.nodes[0][0].shard + 1) % 4 }},
		{"shard out of range", func(r *recorded) { r.nodes[0][0].shard = 99 }},
		{"root key", func(r *recorded) { r.nodes[0][0].key = rootKey }},
		{"binding to no node", func(r *recorded) { r.binds[0][0].ref = 9 }},
		{"no copies", func(r *recorded) { r.binds[0][0].copies = [kv.NumTiers]uint8{} }},
		{"too many copies", func(r *recorded) { r.binds[0][0].copies[0] = 64 }},
		{"bound twice", func(r *recorded) { r.binds[0][1].eh = r.binds[0][0].eh }},
	} {
		r := clone()
		tc.mut(r)
		if _, err := importRecorded(cfg, r); !errors.Is(err, ErrBadExport) {
			t.Errorf("%s: err = %v, want ErrBadExport", tc.name, err)
		}
	}
	if _, err := importRecorded(Config{Shards: 8, SegmentBlocks: 2}, good); err == nil {
		t.Error("import into another geometry succeeded")
	}
	if _, err := importRecorded(cfg, clone()); err != nil {
		t.Fatalf("the unmodified export: %v", err)
	}
}

// TestImportDropsUnboundNodes: nodes no binding holds are dropped by Finish.
func TestImportDropsUnboundNodes(t *testing.T) {
	cfg := Config{Shards: 4, CheckInvariants: true}
	ix := New(cfg)
	w := kv.WorkerRank{ID: "w"}
	if err := ix.Store(w, 0, false, kv.TierHost, []kv.Block{{EngineHash: 1, BlockHash: 10}, {EngineHash: 2, BlockHash: 20}}); err != nil {
		t.Fatal(err)
	}
	r := export(t, ix)
	r.binds[0] = r.binds[0][:1] // the leaf's binding is lost
	cp, err := importRecorded(cfg, r)
	if err != nil {
		t.Fatal(err)
	}
	if st := cp.Stats(); st.Nodes != 1 || st.Residencies != 1 {
		t.Fatalf("stats %+v, want 1 node and 1 residency", st)
	}
}

// resetCounters zeroes the model's operation counters, as an imported index
// starts with none.
func (m *refModel) resetCounters() {
	m.mu.Lock()
	m.st = Stats{}
	m.mu.Unlock()
}

// BenchmarkExportImport copies the benchmark fleet's index (see benchSetup)
// into a new one, rank by rank, straight from an Exporter into an Importer:
// the index's share of writing and loading a snapshot, without the file.
func BenchmarkExportImport(b *testing.B) {
	st := benchSetup(b)
	cfg := Config{SegmentBlocks: envInt("KVROUTER_BENCH_SEGMENT", 0)}
	var cp *Index
	for b.Loop() {
		e := st.ix.NewExporter()
		im, err := NewImporter(cfg, st.ix.Geometry())
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range e.Ranks() {
			if err := im.Rank(w); err != nil {
				b.Fatal(err)
			}
			if err := e.Rank(w, im); err != nil {
				b.Fatal(err)
			}
		}
		if cp, err = im.Finish(); err != nil {
			b.Fatal(err)
		}
	}
	if got := cp.Stats(); got.Residencies != st.residencies {
		b.Fatalf("copy holds %d residencies, the original %d", got.Residencies, st.residencies)
	}
	b.ReportMetric(float64(st.residencies)*float64(b.N)/b.Elapsed().Seconds(), "residencies/s")
}
