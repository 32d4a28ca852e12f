package ingest

import (
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// These tests run Checkpoint and Worker.Resume against testdata/publisher.py
// (libzmq), with the index's own export and import in between, as a
// router's snapshot and restart do.

// memSnapshot is a checkpoint kept in memory: each rank's position, the
// block count of every index rank, and the export's records in order.
type memSnapshot struct {
	geo    radix.Geometry
	pos    map[kv.WorkerRank]Position
	cached map[kv.WorkerRank]uint64
	recs   []func(im *radix.Importer) error
}

func (s *memSnapshot) Node(ref, parent, shard uint32, key uint64, depth uint32) error {
	s.recs = append(s.recs, func(im *radix.Importer) error { return im.Node(ref, parent, shard, key, depth) })
	return nil
}

func (s *memSnapshot) Binding(eh uint64, ref uint32, copies [kv.NumTiers]uint8) error {
	s.recs = append(s.recs, func(im *radix.Importer) error { return im.Binding(eh, ref, copies) })
	return nil
}

// checkpointIndex checkpoints m, exporting idx's index ranks of every rank
// while the rank is paused.
func checkpointIndex(t *testing.T, m *Manager, idx *radix.Index) *memSnapshot {
	t.Helper()
	s := &memSnapshot{geo: idx.Geometry(), pos: map[kv.WorkerRank]Position{}, cached: map[kv.WorkerRank]uint64{}}
	ex := idx.NewExporter()
	err := m.Checkpoint(func(w kv.WorkerRank, pos Position, ranks []kv.WorkerRank) error {
		s.pos[w] = pos
		for _, ir := range ranks {
			s.cached[ir] = idx.Cached(ir)
			s.recs = append(s.recs, func(im *radix.Importer) error { return im.Rank(ir) })
			if err := ex.Rank(ir, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// load imports the snapshot into a new index, which must hold what each
// index rank held at the checkpoint.
func (s *memSnapshot) load(t *testing.T) *radix.Index {
	t.Helper()
	im, err := radix.NewImporter(radix.Config{CheckInvariants: true}, s.geo)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range s.recs {
		if err := rec(im); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := im.Finish()
	if err != nil {
		t.Fatal(err)
	}
	for w, n := range s.cached {
		if got := idx.Cached(w); got != n {
			t.Fatalf("restored index: %v caches %d blocks, %d at the checkpoint", w, got, n)
		}
	}
	return idx
}

// contentRec reads an export as each engine hash's node path and copies.
type contentRec struct {
	path map[uint32]string
	out  map[uint64]string
}

func (c *contentRec) Node(ref, parent, shard uint32, key uint64, depth uint32) error {
	p := "shard " + strconv.Itoa(int(shard))
	if parent != radix.NoRef {
		p = c.path[parent]
	}
	c.path[ref] = fmt.Sprintf("%s/%x@%d", p, key, depth)
	return nil
}

func (c *contentRec) Binding(eh uint64, ref uint32, copies [kv.NumTiers]uint8) error {
	c.out[eh] = fmt.Sprintf("%s %v", c.path[ref], copies)
	return nil
}

// content returns w's blocks in idx: engine hash -> path and copies.
func content(t *testing.T, idx *radix.Index, w kv.WorkerRank) map[uint64]string {
	t.Helper()
	c := &contentRec{path: map[uint32]string{}, out: map[uint64]string{}}
	if err := idx.NewExporter().Rank(w, c); err != nil {
		t.Fatal(err)
	}
	return c.out
}

// restoreCount returns worker id's rank 0 kvrouter_ingest_restores_total for
// outcome.
// rankGauge returns gauge name's value for worker id's rank 0 (0 when it has
// no series).
func rankGauge(t *testing.T, reg *prometheus.Registry, name, id string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range mm.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["worker"] == id && l["dp_rank"] == "0" {
				return mm.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func restoreCount(t *testing.T, reg *prometheus.Registry, id, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kvrouter_ingest_restores_total" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range mm.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["worker"] == id && l["dp_rank"] == "0" && l["outcome"] == outcome {
				return mm.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no restores_total series for %s outcome %s", id, outcome)
	return 0
}

const restoreTopic = "kv@pod-1@model"

// restorePub starts a publisher with a replay socket replying with the topic
// (4 frames), whose topic carries SGLang's epoch; extra are more flags.
func restorePub(t *testing.T, pubPort, replayPort int, epoch string, extra ...string) *pyPub {
	t.Helper()
	topic := restoreTopic + "\x00sgl-kv-epoch=" + epoch
	args := []string{"--pub", fmt.Sprintf("tcp://*:%d", pubPort), "--replay", fmt.Sprintf("tcp://*:%d", replayPort),
		"--replay-topic", "--topic-hex", hex.EncodeToString([]byte(topic))}
	return startPy(t, append(args, extra...)...)
}

// restoreCase is one way a restored router finds its engine again: away is
// what the engine does while no router follows it (N is the checkpoint's
// seq); it returns the publisher to go on with.
type restoreCase struct {
	name   string
	buffer string // the publisher's replay buffer (--buffer); "" for its default
	want   string // RankStatus.Restore
	away   func(t *testing.T, p *pyPub, e *engine, old []*chain, n uint64) *pyPub
}

var restoreCases = []restoreCase{
	{name: "restored", want: "restored",
		away: func(t *testing.T, p *pyPub, e *engine, old []*chain, _ uint64) *pyPub {
			_, ev := e.store(old[0], 2)
			p.publish([]map[string]any{ev}, false)
			p.publish([]map[string]any{e.remove(old[2], 1)}, false)
			_, ev = e.store(nil, 3)
			p.publish([]map[string]any{ev}, false)
			return p
		}},
	// The buffer keeps 4 batches: the engine drops everything, then stores
	// anew, and the buffer starts after the seq the router needs next. The
	// router keeps the snapshot's blocks (inexact) and learns its capacity
	// from them: it holds every block the engine holds.
	{name: "rebuilt", buffer: "4", want: "rebuilt",
		away: func(t *testing.T, p *pyPub, e *engine, _ []*chain, _ uint64) *pyPub {
			p.publish([]map[string]any{e.clearAll()}, false)
			p.publish(nil, false)
			p.publish(nil, false)
			c, ev := e.store(nil, 3)
			p.publish([]map[string]any{ev}, false)
			_, ev = e.store(c, 2)
			p.publish([]map[string]any{ev}, false)
			return p
		}},
	// The engine restarts (a new epoch, seq from 0) and publishes past the
	// checkpoint's seq.
	{name: "reset", want: "reset",
		away: func(t *testing.T, p *pyPub, e *engine, _ []*chain, n uint64) *pyPub {
			p.kill()
			p = restorePub(t, p.PubPort, p.ReplayPort, "e2")
			e.forget()
			for i := uint64(0); i <= n+2; i++ {
				p.publish(nil, false)
			}
			_, ev := e.store(nil, 4)
			p.publish([]map[string]any{ev}, false)
			return p
		}},
}

// TestRestore: a router follows an engine, is checkpointed (positions and
// the index's export, in memory) and stops; the engine goes on; a new
// router imports the export into a fresh index and resumes from the
// positions. Its index then equals the engine's truth and what a router
// that never stopped holds, and Status and the metrics say what happened.
func TestRestore(t *testing.T) {
	for _, tc := range restoreCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runRestoreCase(t, tc)
		})
	}
}

func runRestoreCase(t *testing.T, tc restoreCase) {
	var extra []string
	if tc.buffer != "" {
		extra = []string{"--buffer", tc.buffer}
	}
	p := restorePub(t, 0, 0, "e1", extra...)
	id, rw := "restore-"+tc.name, kv.WorkerRank{ID: "restore-" + tc.name}
	w := Worker{ID: id, Topic: restoreTopic, KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.PubPort),
		ReplayEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.ReplayPort)}
	m1, idx1, _ := newTestManager(t, true)
	ref, idxRef, _ := newTestManager(t, true) // never stops
	for _, m := range []*Manager{m1, ref} {
		if err := m.Add(w); err != nil {
			t.Fatal(err)
		}
		warmUp(t, m, id, func() uint64 { return p.publish(nil, false) })
	}

	e := newEngine(17)
	a, evA := e.store(nil, 4)
	b, evB := e.store(a, 2)
	c, evC := e.store(nil, 3)
	p.publish([]map[string]any{evA, evB}, false)
	p.publish([]map[string]any{evC}, false)
	n := p.publish([]map[string]any{e.remove(b, 1)}, false)
	waitSeq(t, m1, id, n)
	waitSeq(t, ref, id, n)
	snap := checkpointIndex(t, m1, idx1)
	if pos := snap.pos[rw]; !pos.HasSeq || pos.Seq != n || pos.Epoch != "e1" {
		t.Fatalf("checkpoint position %+v, want seq %d in epoch e1", pos, n)
	}
	if got := snap.cached[rw]; got != 8 {
		t.Fatalf("checkpoint: %d blocks, want 8", got)
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}

	p = tc.away(t, p, e, []*chain{a, b, c}, n)
	m2, reg2 := newTestManagerOn(t, snap.load(t), func(r kv.WorkerRank) (Position, bool) {
		pos, ok := snap.pos[r]
		return pos, ok
	})
	if err := m2.Add(w); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the restore's outcome", func() bool { return status(t, m2, id).Restore != "" })
	_, ev := e.store(nil, 2)
	last := p.publish([]map[string]any{ev}, false)
	for _, m := range []*Manager{m2, ref} {
		flush(t, m, id, last, func() uint64 { return p.publish(nil, false) })
	}
	checkRestored(t, tc, m2, reg2, idxRef, e)
}

// checkRestored checks the restored router against the engine and the
// router that never stopped.
func checkRestored(t *testing.T, tc restoreCase, m2 *Manager, reg2 *prometheus.Registry, idxRef *radix.Index, e *engine) {
	t.Helper()
	id := "restore-" + tc.name
	rw := kv.WorkerRank{ID: id}
	idx2 := m2.cfg.Index
	checkTruth(t, idxRef, rw, e)
	st := status(t, m2, id)
	if tc.want == "rebuilt" {
		checkInexact(t, idx2, rw, e, st)
		if got := rankGauge(t, reg2, "kvrouter_ingest_inexact", id); got != 1 {
			t.Errorf("kvrouter_ingest_inexact = %v, want 1", got)
		}
		if got := rankGauge(t, reg2, "kvrouter_ingest_capacity_blocks", id); got != float64(st.CapacityBlocks) || got == 0 {
			t.Errorf("kvrouter_ingest_capacity_blocks = %v, want the status's %d", got, st.CapacityBlocks)
		}
	} else {
		if got := rankGauge(t, reg2, "kvrouter_ingest_inexact", id); got != 0 || st.Inexact {
			t.Errorf("kvrouter_ingest_inexact = %v, status inexact %v: want exact", got, st.Inexact)
		}
		checkTruth(t, idx2, rw, e)
		if got, want := content(t, idx2, rw), content(t, idxRef, rw); !maps.Equal(got, want) {
			t.Errorf("restored index holds %d blocks, the router that never stopped %d, or they differ:\n%v\n%v",
				len(got), len(want), got, want)
		}
	}
	if st.Restore != tc.want {
		t.Errorf("Restore = %q, want %q", st.Restore, tc.want)
	}
	if st.EngineRestarts != 0 || st.ReplayFailures != 0 {
		t.Errorf("restored rank counted restarts or replay failures: %+v", st)
	}
	if got := restoreCount(t, reg2, id, tc.want); got != 1 {
		t.Errorf("restores_total{outcome=%q} = %v, want 1", tc.want, got)
	}
	var sum float64
	for _, o := range restoreOutcomes {
		sum += restoreCount(t, reg2, id, o.name)
	}
	if sum != 1 {
		t.Errorf("restores_total summed over outcomes = %v, want 1", sum)
	}
}

// TestCheckpointCutsAreConsistent: checkpoints taken while a libzmq
// publisher's batches (some dropped on the live socket, so replayed) are
// applied each find the index holding exactly the batches up to the
// position they report: each batch stores 5 blocks in two events, so a cut
// inside a batch, or one whose position and content disagree, shows.
func TestCheckpointCutsAreConsistent(t *testing.T) {
	m, idx, _ := newTestManager(t, false)
	p := startPy(t, "--pub", "tcp://*:0", "--replay", "tcp://*:0")
	id, w := "cuts", kv.WorkerRank{ID: "cuts"}
	if err := m.Add(Worker{ID: id, KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.PubPort),
		ReplayEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.ReplayPort)}); err != nil {
		t.Fatal(err)
	}
	warmUp(t, m, id, func() uint64 { return p.publish(nil, false) })
	e := newEngine(23)
	var first, last uint64 // the first and last batches that store
	cuts := 0
	check := func(_ kv.WorkerRank, pos Position, _ []kv.WorkerRank) error {
		want := uint64(0)
		if pos.HasSeq && pos.Seq >= first {
			want = 5 * (min(pos.Seq, last) - first + 1)
		}
		if got := idx.Cached(w); got != want {
			return fmt.Errorf("cut at seq %d holds %d blocks, want %d", pos.Seq, got, want)
		}
		cuts++
		return nil
	}
	for i := 0; i < 150; i++ {
		_, ev1 := e.store(nil, 2)
		_, ev2 := e.store(nil, 3)
		last = p.publish([]map[string]any{ev1, ev2}, i%10 == 3)
		if i == 0 {
			first = last
		}
		if err := m.Checkpoint(check); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, m, id, last, func() uint64 { return p.publish(nil, false) })
	if err := m.Checkpoint(check); err != nil {
		t.Fatal(err)
	}
	checkTruth(t, idx, w, e)
	if cuts != 151 {
		t.Errorf("%d cuts, want 151", cuts)
	}
}

// checkInexact checks an inexact rank: it holds every block the engine
// holds (no under-claim), and says it is inexact.
func checkInexact(t *testing.T, idx *radix.Index, w kv.WorkerRank, e *engine, st RankStatus) {
	t.Helper()
	if err := e.covered(idx, w); err != nil {
		t.Error(err)
	}
	// The engine stored less than the capacity since: nothing is trimmed
	// yet (TestTrimOldestFirst), what the rank claims is under twice it.
	if !st.Inexact || st.InexactSinceSeq == 0 || st.CapacityBlocks == 0 || st.CachedBlocks > 2*st.CapacityBlocks {
		t.Errorf("status %+v: want inexact since a seq, holding under twice its capacity", st)
	}
	if st.CachedBlocks <= uint64(len(e.held)) {
		t.Errorf("status %+v: want over-claims kept (more than the engine's %d blocks)", st, len(e.held))
	}
}
