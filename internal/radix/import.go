package radix

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// ErrBadExport: an import was handed records no export writes.
var ErrBadExport = errors.New("bad export")

// Importer builds a new index from an export's records, in the order an
// Exporter gave them. It checks every record, so a file that passed its
// checksums but was written by something else still cannot build an index
// that breaks the index's invariants: the import fails instead, and the
// half-built index is dropped with the Importer. The index is the
// Importer's alone until Finish, so it takes no locks.
type Importer struct {
	ix      *Index
	where   []uint64 // by ref: shard<<32 | node id in the new index
	depth   []uint32 // by ref
	ws      *workerState
	pending []exportBinding // the current rank's bindings
}

// NewImporter starts an empty index for cfg and checks that g, the geometry
// of the export to come, is cfg's: paths are filed by shard and segment, so an
// export is meaningless to an index of another geometry.
func NewImporter(cfg Config, g Geometry) (*Importer, error) {
	ix := New(cfg)
	if have := ix.Geometry(); have != g {
		return nil, fmt.Errorf("import: export has %d shards and %d-block segments, the index %d and %d",
			g.Shards, g.SegmentBlocks, have.Shards, have.SegmentBlocks)
	}
	return &Importer{ix: ix}, nil
}

// Node adds node ref under its parent (made by an earlier Node), or finds the node
// there when another Ref already made it.
func (im *Importer) Node(ref, parent, shard uint32, key uint64, depth uint32) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("import node %d: %s: %w", ref, fmt.Sprintf(format, args...), ErrBadExport)
	}
	if int(ref) != len(im.where) {
		return bad("out of order (expected %d)", len(im.where))
	}
	if key == rootKey {
		return bad("root's key")
	}
	si, under := int(shard), uint32(rootID)
	if parent != NoRef {
		if parent >= ref {
			return bad("parent %d not made before it", parent)
		}
		p := im.where[parent]
		if int(p>>32) != si {
			return bad("parent in shard %d, node in %d", p>>32, si)
		}
		if depth != im.depth[parent]+1 {
			return bad("depth %d under a parent at depth %d", depth, im.depth[parent])
		}
		if im.ix.segmentStart(depth) {
			return bad("depth %d starts a segment but has a parent", depth)
		}
		under = uint32(p)
	} else {
		if si >= len(im.ix.shards) || si != im.ix.shardOf(key) {
			return bad("shard %d is not its key's", si)
		}
		if !im.ix.segmentStart(depth) {
			return bad("depth %d does not start a segment but has no parent", depth)
		}
	}
	id := im.ix.shards[si].child(under, key, depth)
	im.where = append(im.where, uint64(si)<<32|uint64(id))
	im.depth = append(im.depth, depth)
	return nil
}

// Rank starts the bindings of w.
func (im *Importer) Rank(w kv.WorkerRank) error {
	if err := im.flush(); err != nil {
		return err
	}
	ws := im.ix.reg.getOrCreate(im.ix, w)
	if ws.blocks.len() > 0 {
		return fmt.Errorf("import rank %s: given twice: %w", w, ErrBadExport)
	}
	im.ws = ws
	return nil
}

// Binding binds one engine hash of the current rank. Bindings are checked
// here and applied in bulk when the rank ends (the worker map is sized once).
func (im *Importer) Binding(engineHash uint64, ref uint32, copies [kv.NumTiers]uint8) error {
	bad := func(what string) error {
		return fmt.Errorf("import engine hash %#x: %s: %w", engineHash, what, ErrBadExport)
	}
	switch {
	case im.ws == nil:
		return fmt.Errorf("import binding before any rank: %w", ErrBadExport)
	case int(ref) >= len(im.where):
		return bad(fmt.Sprintf("node %d not made", ref))
	}
	bd := makeBinding(int(im.where[ref]>>32), uint32(im.where[ref]))
	for t, c := range copies {
		if c > maxCopies {
			return bad(fmt.Sprintf("%d copies", c))
		}
		bd = bd.withCopies(kv.Tier(t), uint32(c))
	}
	if bd.empty() {
		return bad("no copies")
	}
	im.pending = append(im.pending, exportBinding{engineHash, bd})
	return nil
}

// EndRank applies the current rank's bindings, so that an error in them is
// reported with the rank (Rank and Finish do it too).
func (im *Importer) EndRank() error { return im.flush() }

// flush applies the current rank's pending bindings: one worker-map entry and
// one holder-set change each.
func (im *Importer) flush() error {
	ws, pend := im.ws, im.pending
	im.pending = pend[:0]
	if ws == nil || len(pend) == 0 {
		return nil
	}
	ws.blocks.reserve(len(pend))
	var memo setMemo
	memoShard := -1
	for _, x := range pend {
		p, had := ws.blocks.ref(x.eh)
		if had {
			return fmt.Errorf("import %s engine hash %#x: bound twice: %w", ws.w, x.eh, ErrBadExport)
		}
		d := x.b.holderDelta()
		for t := range d {
			d[t] = -d[t]
		}
		if x.b.shard() != memoShard {
			memo, memoShard = setMemo{}, x.b.shard()
		}
		if !im.ix.shards[x.b.shard()].adjust(x.b.node(), ws.slot, d, &memo) {
			ws.blocks.del(x.eh)
			return fmt.Errorf("import %s engine hash %#x: too many engine hashes of the rank on one node: %w", ws.w, x.eh, ErrBadExport)
		}
		*p = uint64(x.b)
	}
	ws.setCached()
	return nil
}

// Finish returns the index built, after dropping the nodes the export made
// that no binding holds (an export only makes nodes some binding needs, so a
// valid one leaves none). Children come after their parents, so a walk from
// the last Ref back frees a dangling chain from its leaf up.
func (im *Importer) Finish() (*Index, error) {
	if err := im.flush(); err != nil {
		return nil, err
	}
	for ref := len(im.where) - 1; ref >= 0; ref-- {
		sh, id := im.ix.shards[im.where[ref]>>32], uint32(im.where[ref])
		if id >= sh.next || int(id>>chunkBits) >= len(sh.chunks) {
			continue // the shard was emptied and reset
		}
		if m := sh.meta(id); m.parent != noParent && m.set == emptySet && m.nchild == 0 {
			sh.release(id)
		}
	}
	im.ws = nil
	if im.ix.cfg.CheckInvariants {
		if err := im.ix.CheckInvariants(); err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
	}
	return im.ix, nil
}
