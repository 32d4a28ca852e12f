package radix

import (
	"fmt"
	"slices"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// NoRef is the parent of an exported node that starts a path segment: it
// hangs under its shard's root.
const NoRef = ^uint32(0)

// ExportSink receives an export, rank by rank: the tree nodes the rank's
// bindings need that were not exported before (parents first), then the
// rank's bindings.
//
// A node is named by ref, the number of nodes exported before it. parent is
// an earlier node's ref, or NoRef when the node starts a path segment in
// shard; key is its path key and depth the number of blocks before it on its
// path. A binding is one engine hash of the rank, the ref of the node it is
// bound to, and its copies per tier.
type ExportSink interface {
	Node(ref, parent, shard uint32, key uint64, depth uint32) error
	Binding(engineHash uint64, ref uint32, copies [kv.NumTiers]uint8) error
}

// Geometry is what an export's Refs and shards mean only under: an index with
// other shard counts or segment lengths files the same paths elsewhere.
type Geometry struct {
	Shards        uint32
	SegmentBlocks uint32
}

// Exporter writes an index's content one worker/rank at a time, naming each
// tree node once however many ranks hold it. Ranks are exported under their
// own lock only (the rest of the index goes on changing), so a node id met
// again may have been freed and reused meanwhile: a node is the one exported
// before only if its path key is the same, else it gets a new Ref. Two Refs
// for one path (a node freed and made again between two ranks) are merged
// again on import.
type Exporter struct {
	ix *Index
	// refOf[shard][node id] is the Ref the node was exported as, plus one
	// (0: not exported).
	refOf [][]uint32
	keys  []uint64 // by Ref
	n     uint32

	bs    []exportBinding
	tmp   []exportBinding // radix sort's other buffer
	refs  []uint32        // by position in bs
	nodes []exportNode
	stack []uint32
}

type exportNode struct {
	ref, parent, shard uint32
	key                uint64
	depth              uint32
}

type exportBinding struct {
	eh uint64
	b  binding
}

// NewExporter starts an export of ix.
func (ix *Index) NewExporter() *Exporter {
	return &Exporter{ix: ix, refOf: make([][]uint32, len(ix.shards))}
}

// Geometry returns the index's geometry, which an import must match.
func (ix *Index) Geometry() Geometry {
	return Geometry{Shards: uint32(len(ix.shards)), SegmentBlocks: ix.seg}
}

// Ranks returns the worker/ranks that hold blocks (see Index.Workers).
func (e *Exporter) Ranks() []kv.WorkerRank { return e.ix.Workers() }

// Rank exports w: it holds w's lock while it reads w's bindings and their
// nodes, and calls sink after releasing every lock. The caller keeps w's
// writer from applying events meanwhile if the export must match a stream
// position (w's lock is taken per call, not per batch).
func (e *Exporter) Rank(w kv.WorkerRank, sink ExportSink) error {
	ws := e.ix.reg.get(w)
	if ws == nil {
		return nil
	}
	ws.mu.Lock()
	if ws.dead.Load() { // (removed since: nothing to export)
		ws.mu.Unlock()
		return nil
	}
	e.bs = e.bs[:0]
	ws.blocks.all(func(eh, v uint64) { e.bs = append(e.bs, exportBinding{eh, binding(v)}) })
	e.sortBindings()
	e.nodes = e.nodes[:0]
	refs := slices.Grow(e.refs[:0], len(e.bs))[:len(e.bs)]
	e.refs = refs
	for i := 0; i < len(e.bs); {
		si := e.bs[i].b.shard()
		sh := e.ix.shards[si]
		sh.mu.RLock()
		for ; i < len(e.bs) && e.bs[i].b.shard() == si; i++ {
			refs[i] = e.node(sh, si, e.bs[i].b.node())
		}
		sh.mu.RUnlock()
	}
	ws.mu.Unlock()

	for _, n := range e.nodes {
		if err := sink.Node(n.ref, n.parent, n.shard, n.key, n.depth); err != nil {
			return fmt.Errorf("export %s: %w", w, err)
		}
	}
	for i, xb := range e.bs {
		var copies [kv.NumTiers]uint8
		for t := kv.Tier(0); t < kv.NumTiers; t++ {
			copies[t] = uint8(xb.b.copies(t))
		}
		if err := sink.Binding(xb.eh, refs[i], copies); err != nil {
			return fmt.Errorf("export %s: %w", w, err)
		}
	}
	return nil
}

// node returns id's Ref, exporting it and its unexported ancestors in the
// shard first (parents before children). The shard is read-locked.
func (e *Exporter) node(sh *shard, si int, id uint32) uint32 {
	st := e.stack[:0]
	for cur := id; cur != rootID; cur = sh.meta(cur).parent {
		if _, ok := e.known(sh, si, cur); ok {
			break
		}
		st = append(st, cur)
	}
	for j := len(st) - 1; j >= 0; j-- {
		cur := st[j]
		m := sh.meta(cur)
		parent := NoRef
		if m.parent != rootID {
			parent, _ = e.known(sh, si, m.parent)
		}
		ref := e.n
		e.n++
		e.keys = append(e.keys, m.key)
		tab := e.refOf[si]
		if int(cur) >= len(tab) {
			tab = slices.Grow(tab, int(sh.next)-len(tab))[:sh.next]
			e.refOf[si] = tab
		}
		tab[cur] = ref + 1
		e.nodes = append(e.nodes, exportNode{ref: ref, parent: parent, shard: uint32(si), key: m.key, depth: m.depth})
	}
	e.stack = st
	r, _ := e.known(sh, si, id)
	return r
}

// known returns the Ref id was exported as, if the node there now is that
// node. A path key names its whole path, so an equal key in the same shard is
// the same node, or one freed and made again for the same path, which is as
// good.
func (e *Exporter) known(sh *shard, si int, id uint32) (uint32, bool) {
	tab := e.refOf[si]
	if int(id) >= len(tab) || tab[id] == 0 {
		return 0, false
	}
	ref := tab[id] - 1
	return ref, e.keys[ref] == sh.meta(id).key
}

// sortBindings orders bs by shard, then node id: each shard is locked once,
// and the nodes of a run, made at consecutive ids, get consecutive refs, which
// a snapshot stores in no bytes. A least-significant-digit radix sort on the
// 40 bits of shard and node: a comparison sort of every rank costs several
// times the rest of the export.
func (e *Exporter) sortBindings() {
	const place = 1<<40 - 1
	src := e.bs
	dst := slices.Grow(e.tmp[:0], len(src))[:len(src)]
	for shift := 0; shift < 40; shift += 8 {
		var count [256]int
		for _, x := range src {
			count[(x.b&place)>>shift&0xff]++
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for _, x := range src {
			d := (x.b & place) >> shift & 0xff
			dst[count[d]] = x
			count[d]++
		}
		src, dst = dst, src
	}
	// Five passes leave the result in the other buffer.
	e.bs, e.tmp = src, dst
}
