package state

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// ReadSnapshot reads a snapshot from r into v, calling v's methods as it
// decodes the records (see Visitor), and returns the counts read. It
// decodes only frames whose checksum matched, but the file as a whole is
// verified only at its end: it returns nil only when the whole file,
// trailer and whole-file checksum included, was read and verified. Build
// into something fresh and drop it on error.
//
// A bad file (corrupt, truncated, of another version) is an error wrapping
// ErrCorrupt, ErrTruncated or ErrFutureVersion with the offset; an error
// from v stops the read and is returned wrapped, with the offset of the
// record (v can refuse a file as bad by wrapping ErrCorrupt); r's errors
// are returned as they are. It never panics on any input, and it keeps 8
// bytes per node and one frame.
func ReadSnapshot(r io.Reader, v Visitor) (Counts, error) {
	sr := snapReader{fr: frameReader{r: r}, v: v, keys: map[kv.WorkerRank]struct{}{}}
	err := sr.read()
	return sr.counts, err
}

// snapReader is ReadSnapshot's state.
type snapReader struct {
	fr    frameReader
	v     Visitor
	g     Geometry
	nodes []nodeInfo // by ref
	keys  map[kv.WorkerRank]struct{}

	inRank       bool
	bound        bool // the open rank had a binding: no more nodes
	key          kv.WorkerRank
	rankNodes    uint64
	rankBindings uint64
	prev         uint32

	counts Counts
}

// visitorError is a Visitor's error, at the offset of the record it refused.
type visitorError struct {
	off int64
	err error
}

func (e *visitorError) Error() string { return fmt.Sprintf("offset %d: %v", e.off, e.err) }
func (e *visitorError) Unwrap() error { return e.err }

func visitorErr(off int64, err error) error { return &visitorError{off, err} }

func (r *snapReader) read() error {
	v, err := r.fr.header(snapshotMagic, snapshotVersion)
	if err != nil {
		return err
	}
	if v != snapshotVersion {
		return formatErr(ErrCorrupt, 8, "format version %d, this build reads only %d", v, snapshotVersion)
	}
	typ, p, err := r.fr.next()
	if err == io.EOF {
		err = formatErr(ErrTruncated, r.fr.off, "no head frame")
	}
	if err != nil {
		return err
	}
	if typ != frameHead {
		return formatErr(ErrCorrupt, fileHeaderLen, "first frame of type %#02x, want head", typ)
	}
	d := decoder{p: p}
	tiers := d.byte()
	r.g.Shards = d.uint32()
	r.g.SegmentBlocks = d.uint32()
	switch {
	case d.err != nil || d.pos != len(p):
		return formatErr(ErrCorrupt, fileHeaderLen, "bad head frame")
	case tiers != byte(kv.NumTiers):
		return formatErr(ErrCorrupt, fileHeaderLen, "%d tiers, this build has %d", tiers, kv.NumTiers)
	}
	if err := r.v.Geometry(r.g); err != nil {
		return visitorErr(fileHeaderLen, err)
	}
	for {
		typ, p, err := r.fr.next()
		if err == io.EOF {
			return formatErr(ErrTruncated, r.fr.off, "file ends without a trailer")
		}
		if err != nil {
			return err
		}
		base := r.fr.off - int64(len(p))
		switch typ {
		case frameData:
			if len(p) == 0 {
				return formatErr(ErrCorrupt, base, "empty data frame")
			}
			if err := r.records(p, base); err != nil {
				return err
			}
		case frameTrailer:
			return r.trailer(p, base)
		default:
			return formatErr(ErrCorrupt, base-frameHeaderLen, "frame of type %#02x", typ)
		}
	}
}

// trailer checks the trailer frame p at base and the end of the file.
func (r *snapReader) trailer(p []byte, base int64) error {
	if r.inRank {
		return formatErr(ErrCorrupt, base, "trailer inside rank %s", r.key)
	}
	d := decoder{p: p}
	c := Counts{Ranks: d.uvarint(), Nodes: d.uvarint(), Bindings: d.uvarint()}
	if d.err != nil || len(p)-d.pos != 4 {
		return formatErr(ErrCorrupt, base, "bad trailer")
	}
	if c != r.counts {
		return formatErr(ErrCorrupt, base, "trailer counts %+v, read %+v", c, r.counts)
	}
	if got, want := binary.LittleEndian.Uint32(p[d.pos:]), r.fr.sumBefore; got != want {
		return formatErr(ErrCorrupt, base+int64(d.pos), "file checksum %#08x, computed %#08x", got, want)
	}
	return r.fr.atEOF()
}

// records decodes the records of data frame p, at offset base in the file.
func (r *snapReader) records(p []byte, base int64) error {
	pos := 0
	bad := func(format string, args ...any) error {
		return formatErr(ErrCorrupt, base+int64(pos), format, args...)
	}
	for pos < len(p) {
		lead := p[pos]
		pos++
		kind := lead & 0xf
		if kind <= recBindDelta { // a binding, the most common record
			var err error
			if pos, err = r.binding(p, pos, lead, base); err != nil {
				return err
			}
			continue
		}
		if lead>>4 != 0 {
			return bad("record %#02x", lead)
		}
		var err error
		switch kind {
		case recNodeChain, recNodeBack, recNodeStart:
			pos, err = r.node(p, pos, kind, base)
		case recRankBegin:
			pos, err = r.beginRank(p, pos, base)
		case recRankEnd:
			pos, err = r.endRank(p, pos, base)
		default:
			return bad("record %#02x", lead)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// binding decodes a binding record whose lead byte is lead and whose fields
// start at p[pos], hands it to the visitor and returns the position after it.
func (r *snapReader) binding(p []byte, pos int, lead byte, base int64) (int, error) {
	start := pos - 1
	kind := lead & 0xf
	bad := func(format string, args ...any) (int, error) {
		return 0, formatErr(ErrCorrupt, base+int64(pos), format, args...)
	}
	if !r.inRank {
		return bad("binding outside a rank")
	}
	ref := uint64(r.prev) + 1
	switch kind {
	case recBindSame:
		ref--
	case recBindDelta:
		z, n := binary.Uvarint(p[pos:])
		if n <= 0 || z == 0 || z == 2 {
			return bad("rank %s: bad binding ref delta", r.key)
		}
		pos += n
		ref = uint64(int64(r.prev) + (int64(z>>1) ^ -int64(z&1)))
	}
	if ref >= uint64(len(r.nodes)) {
		return bad("rank %s: binding of node %d, %d nodes read", r.key, int64(ref), len(r.nodes))
	}
	var copies [kv.NumTiers]uint8
	if m := lead >> 4; m != 0 {
		copies = [kv.NumTiers]uint8{m & 1, m >> 1 & 1, m >> 2 & 1, m >> 3}
	} else {
		if pos >= len(p) || p[pos] == 0 || p[pos]>>kv.NumTiers != 0 {
			return bad("rank %s: binding of node %d: bad tier mask", r.key, ref)
		}
		mask := p[pos]
		pos++
		single := true
		for t := range copies {
			if mask&(1<<t) != 0 {
				if pos >= len(p) || p[pos] == 0 || p[pos] > maxCopies {
					return bad("rank %s: binding of node %d: bad copy count", r.key, ref)
				}
				copies[t] = p[pos]
				single = single && p[pos] == 1
				pos++
			}
		}
		if single {
			return bad("rank %s: binding of node %d: explicit copies, all 1", r.key, ref)
		}
	}
	if len(p)-pos < 8 {
		return bad("rank %s: binding crosses the frame end", r.key)
	}
	eh := binary.LittleEndian.Uint64(p[pos:])
	pos += 8
	r.prev = uint32(ref)
	r.bound = true
	r.rankBindings++
	r.counts.Bindings++
	if err := r.v.Binding(eh, uint32(ref), copies); err != nil {
		return 0, visitorErr(base+int64(start), err)
	}
	return pos, nil
}

// node decodes a node record of kind whose fields start at p[pos] and
// returns the position after it.
func (r *snapReader) node(p []byte, pos int, kind byte, base int64) (int, error) {
	start := pos - 1
	bad := func(format string, args ...any) (int, error) {
		return 0, formatErr(ErrCorrupt, base+int64(pos), format, args...)
	}
	n := uint64(len(r.nodes))
	switch {
	case !r.inRank:
		return bad("node outside a rank")
	case r.bound:
		return bad("rank %s: node after the rank's bindings", r.key)
	case n >= uint64(NoRef):
		return bad("rank %s: more than %d nodes", r.key, NoRef)
	}
	ref := uint32(n)
	var nd nodeInfo
	parent := NoRef
	switch kind {
	case recNodeChain, recNodeBack:
		if ref == 0 {
			return bad("rank %s: node 0 has a parent", r.key)
		}
		parent = ref - 1
		if kind == recNodeBack {
			d, m := binary.Uvarint(p[pos:])
			if m <= 0 || d >= uint64(ref)-1 {
				return bad("rank %s node %d: bad parent distance", r.key, ref)
			}
			pos += m
			parent = ref - 2 - uint32(d)
		}
		pn := r.nodes[parent]
		if pn.depth == math.MaxUint32 {
			return bad("rank %s node %d: parent %d at the deepest depth", r.key, ref, parent)
		}
		nd = nodeInfo{shard: pn.shard, depth: pn.depth + 1}
	default:
		d := decoder{p: p, pos: pos}
		nd.shard = d.uint32()
		nd.depth = d.uint32()
		if d.err != nil {
			return bad("rank %s node %d: %v", r.key, ref, d.err)
		}
		pos = d.pos
		if nd.shard >= r.g.Shards {
			return bad("rank %s node %d: shard %d of %d", r.key, ref, nd.shard, r.g.Shards)
		}
	}
	if len(p)-pos < 8 {
		return bad("rank %s node %d: record crosses the frame end", r.key, ref)
	}
	key := binary.LittleEndian.Uint64(p[pos:])
	pos += 8
	r.nodes = appendNode(r.nodes, nd)
	r.rankNodes++
	r.counts.Nodes++
	if err := r.v.Node(ref, parent, nd.shard, key, nd.depth); err != nil {
		return 0, visitorErr(base+int64(start), err)
	}
	return pos, nil
}

// beginRank decodes a rank begin whose fields start at p[pos].
func (r *snapReader) beginRank(p []byte, pos int, base int64) (int, error) {
	start := pos - 1
	bad := func(format string, args ...any) (int, error) {
		return 0, formatErr(ErrCorrupt, base+int64(start), format, args...)
	}
	if r.inRank {
		return bad("rank begins inside rank %s", r.key)
	}
	d := decoder{p: p, pos: pos}
	var key kv.WorkerRank
	var s Stream
	key.ID = d.string(maxField)
	key.DPRank = d.uint32()
	switch flags := d.byte(); flags {
	case 0:
	case 1:
		s.HasSeq, s.Seq = true, d.uvarint()
		s.Sum = d.uint64()
	default:
		d.fail("stream flags %#02x", flags)
	}
	s.Epoch = d.string(maxField)
	if d.err == nil && key.ID == "" {
		d.fail("empty worker id")
	}
	if d.err != nil {
		return bad("rank record: %v", d.err)
	}
	if _, dup := r.keys[key]; dup {
		return bad("rank %s twice", key)
	}
	r.keys[key] = struct{}{}
	r.inRank, r.bound, r.key = true, false, key
	r.rankNodes, r.rankBindings, r.prev = 0, 0, 0
	r.counts.Ranks++
	if err := r.v.BeginRank(key, s); err != nil {
		return 0, visitorErr(base+int64(start), err)
	}
	return d.pos, nil
}

// endRank decodes a rank end whose fields start at p[pos].
func (r *snapReader) endRank(p []byte, pos int, base int64) (int, error) {
	start := pos - 1
	if !r.inRank {
		return 0, formatErr(ErrCorrupt, base+int64(start), "rank end outside a rank")
	}
	d := decoder{p: p, pos: pos}
	nodes, bindings := d.uvarint(), d.uvarint()
	if d.err != nil || nodes != r.rankNodes || bindings != r.rankBindings {
		return 0, formatErr(ErrCorrupt, base+int64(start), "rank %s of %d nodes and %d bindings: bad end", r.key, r.rankNodes, r.rankBindings)
	}
	r.inRank = false
	if err := r.v.EndRank(); err != nil {
		return 0, visitorErr(base+int64(start), err)
	}
	return d.pos, nil
}
