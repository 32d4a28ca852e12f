package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Writer streams a snapshot to an io.Writer (see the format in
// snapshot_format.go): for each rank BeginRank, its new nodes (Node), its
// bindings (Binding) and EndRank, then Close. It checks every record
// against the format and buffers one frame (64 KiB) and 8 bytes per node,
// never the file. The first error sticks: every later call returns it.
// Not safe for concurrent use.
type Writer struct {
	w   io.Writer
	g   Geometry
	err error
	buf []byte // the open frame; buf[:frameHeaderLen] is its header
	sum uint32 // CRC32C of the bytes written

	nodes []nodeInfo // by ref
	keys  map[kv.WorkerRank]struct{}

	inRank       bool
	key          kv.WorkerRank
	rankNodes    uint64
	rankBindings uint64
	prev         uint32 // the rank's previous binding's ref

	counts Counts
	closed bool
}

// NewWriter starts a snapshot of an index of geometry g on w: it writes
// the header at once.
func NewWriter(w io.Writer, g Geometry) *Writer {
	sw := &Writer{
		w:    w,
		g:    g,
		buf:  make([]byte, frameHeaderLen, frameTarget+3*maxField),
		keys: map[kv.WorkerRank]struct{}{},
	}
	head := appendFileHeader(nil, snapshotMagic, snapshotVersion)
	p := binary.AppendUvarint([]byte{byte(kv.NumTiers)}, uint64(g.Shards))
	p = binary.AppendUvarint(p, uint64(g.SegmentBlocks))
	sw.write(appendFrame(head, frameHead, p))
	return sw
}

// Counts returns what was written so far.
func (w *Writer) Counts() Counts { return w.counts }

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = fmt.Errorf("snapshot writer: %w", err)
	}
	return w.err
}

// write writes b to the file.
func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	n, err := w.w.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.fail(err)
		return
	}
	w.sum = crc32.Update(w.sum, castagnoli, b)
}

// flush writes the open data frame, if it holds anything.
func (w *Writer) flush() {
	if len(w.buf) == frameHeaderLen {
		return
	}
	sealFrame(w.buf, frameData)
	w.write(w.buf)
	w.buf = w.buf[:frameHeaderLen]
}

// endRecord closes the frame if it passed frameTarget.
func (w *Writer) endRecord() error {
	if len(w.buf)-frameHeaderLen >= frameTarget {
		w.flush()
	}
	return w.err
}

// BeginRank starts rank key, whose stream position is s. Each key appears
// once in a snapshot.
func (w *Writer) BeginRank(key kv.WorkerRank, s Stream) error {
	switch {
	case w.err != nil:
		return w.err
	case w.closed:
		return w.fail(errors.New("begin rank: closed"))
	case w.inRank:
		return w.fail(fmt.Errorf("begin rank %s: rank %s not ended", key, w.key))
	case key.ID == "" || len(key.ID) > maxField || len(s.Epoch) > maxField:
		return w.fail(fmt.Errorf("begin rank %s: worker id of %d bytes or epoch of %d (1 to %d)", key, len(key.ID), len(s.Epoch), maxField))
	}
	if _, dup := w.keys[key]; dup {
		return w.fail(fmt.Errorf("begin rank %s: written twice", key))
	}
	w.keys[key] = struct{}{}
	b := appendString(append(w.buf, recRankBegin), key.ID)
	b = binary.AppendUvarint(b, uint64(key.DPRank))
	if s.HasSeq {
		b = binary.AppendUvarint(append(b, 1), s.Seq)
		b = binary.LittleEndian.AppendUint64(b, s.Sum)
	} else {
		b = append(b, 0)
	}
	w.buf = appendString(b, s.Epoch)
	w.inRank, w.key = true, key
	w.rankNodes, w.rankBindings, w.prev = 0, 0, 0
	w.counts.Ranks++
	return w.endRecord()
}

// Node writes the open rank's next new node, before the rank's bindings.
// ref must be the number of nodes written before (refs count from 0
// across the file). parent is an earlier ref, and then shard and depth
// must be the parent's shard and its depth + 1 (they are not written), or
// NoRef for a node that starts a path segment (shard < Geometry.Shards).
// Write a chain in order: a parent that is the previous ref costs no byte.
func (w *Writer) Node(ref, parent, shard uint32, key uint64, depth uint32) error {
	if w.err != nil {
		return w.err
	}
	switch n := uint64(len(w.nodes)); {
	case !w.inRank:
		return w.fail(fmt.Errorf("node %d outside a rank", ref))
	case w.rankBindings > 0:
		return w.fail(fmt.Errorf("rank %s: node %d after the rank's bindings", w.key, ref))
	case uint64(ref) != n || ref == NoRef:
		return w.fail(fmt.Errorf("rank %s: node %d, want ref %d", w.key, ref, n))
	}
	b := w.buf
	switch {
	case parent == NoRef:
		if shard >= w.g.Shards {
			return w.fail(fmt.Errorf("rank %s node %d: shard %d of %d", w.key, ref, shard, w.g.Shards))
		}
		b = binary.AppendUvarint(append(b, recNodeStart), uint64(shard))
		b = binary.AppendUvarint(b, uint64(depth))
	case parent >= ref:
		return w.fail(fmt.Errorf("rank %s node %d: parent %d is not an earlier node", w.key, ref, parent))
	default:
		p := w.nodes[parent]
		if shard != p.shard || p.depth == math.MaxUint32 || depth != p.depth+1 {
			return w.fail(fmt.Errorf("rank %s node %d: shard %d depth %d under node %d of shard %d depth %d", w.key, ref, shard, depth, parent, p.shard, p.depth))
		}
		if parent == ref-1 {
			b = append(b, recNodeChain)
		} else {
			b = binary.AppendUvarint(append(b, recNodeBack), uint64(ref-2-parent))
		}
	}
	w.buf = binary.LittleEndian.AppendUint64(b, key)
	w.nodes = appendNode(w.nodes, nodeInfo{shard: shard, depth: depth})
	w.rankNodes++
	w.counts.Nodes++
	return w.endRecord()
}

// appendNode appends like append, doubling: append grows big slices by 1.25.
func appendNode(s []nodeInfo, n nodeInfo) []nodeInfo {
	if len(s) == cap(s) {
		s = append(make([]nodeInfo, 0, max(1024, 2*cap(s))), s...)
	}
	return append(s, n)
}

// Binding writes a binding of the open rank: engineHash on node ref (a
// node written before), with copies per tier (1 to 63 each, not all 0).
// Write a rank's bindings in ascending ref order where it can: a ref one
// past the previous binding's, or the same, costs no byte.
func (w *Writer) Binding(engineHash uint64, ref uint32, copies [kv.NumTiers]uint8) error {
	if w.err != nil {
		return w.err
	}
	if !w.inRank {
		return w.fail(fmt.Errorf("binding of node %d outside a rank", ref))
	}
	if uint64(ref) >= uint64(len(w.nodes)) {
		return w.fail(fmt.Errorf("rank %s: binding of node %d, %d nodes written", w.key, ref, len(w.nodes)))
	}
	code, mask, bad := copiesCode(copies)
	if mask == 0 || bad {
		return w.fail(fmt.Errorf("rank %s: binding of node %d with copies %v (1 to %d, not all 0)", w.key, ref, copies, maxCopies))
	}
	b := w.buf
	switch d := int64(ref) - int64(w.prev); d {
	case 1:
		b = append(b, code<<4|recBindNext)
	case 0:
		b = append(b, code<<4|recBindSame)
	default:
		b = binary.AppendUvarint(append(b, code<<4|recBindDelta), uint64(d<<1^d>>63))
	}
	if code == 0 {
		b = append(b, mask)
		for _, c := range copies {
			if c > 0 {
				b = append(b, c)
			}
		}
	}
	w.buf = binary.LittleEndian.AppendUint64(b, engineHash)
	w.prev = ref
	w.rankBindings++
	w.counts.Bindings++
	return w.endRecord()
}

// EndRank ends the open rank.
func (w *Writer) EndRank() error {
	if w.err != nil {
		return w.err
	}
	if !w.inRank {
		return w.fail(errors.New("end rank: no rank open"))
	}
	b := binary.AppendUvarint(append(w.buf, recRankEnd), w.rankNodes)
	w.buf = binary.AppendUvarint(b, w.rankBindings)
	w.inRank = false
	return w.endRecord()
}

// Close writes the last data frame and the trailer. It does not close the
// underlying writer. A snapshot is whole only if Close returns nil.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return nil
	}
	if w.inRank {
		return w.fail(fmt.Errorf("close: rank %s not ended", w.key))
	}
	w.flush()
	p := binary.AppendUvarint(nil, w.counts.Ranks)
	p = binary.AppendUvarint(p, w.counts.Nodes)
	p = binary.AppendUvarint(p, w.counts.Bindings)
	p = binary.LittleEndian.AppendUint32(p, w.sum)
	w.write(appendFrame(nil, frameTrailer, p))
	w.closed = true
	return w.err
}
