package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// nodeRec, bindRec and rankData are a snapshot's records, as written or read.
type nodeRec struct {
	ref, parent, shard uint32
	key                uint64
	depth              uint32
}

type bindRec struct {
	eh     uint64
	ref    uint32
	copies [kv.NumTiers]uint8
}

type rankData struct {
	key      kv.WorkerRank
	stream   Stream
	nodes    []nodeRec
	bindings []bindRec
}

type snapData struct {
	g     Geometry
	ranks []rankData
}

// writeSnap writes s's ranks with w (not closing it); it stops at the
// first error.
func writeSnap(w *Writer, ranks []rankData) error {
	for _, rd := range ranks {
		if err := w.BeginRank(rd.key, rd.stream); err != nil {
			return err
		}
		for _, n := range rd.nodes {
			if err := w.Node(n.ref, n.parent, n.shard, n.key, n.depth); err != nil {
				return err
			}
		}
		for _, b := range rd.bindings {
			if err := w.Binding(b.eh, b.ref, b.copies); err != nil {
				return err
			}
		}
		if err := w.EndRank(); err != nil {
			return err
		}
	}
	return nil
}

// encode writes s as a snapshot.
func encode(t testing.TB, s snapData) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, s.g)
	if err := writeSnap(w, s.ranks); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if c := w.Counts(); c != countOf(s) {
		t.Fatalf("writer counts %+v, want %+v", c, countOf(s))
	}
	return buf.Bytes()
}

// collector is a Visitor keeping what it is given.
type collector struct {
	s snapData
}

func (c *collector) Geometry(g Geometry) error { c.s.g = g; return nil }
func (c *collector) BeginRank(key kv.WorkerRank, s Stream) error {
	c.s.ranks = append(c.s.ranks, rankData{key: key, stream: s})
	return nil
}
func (c *collector) rank() *rankData { return &c.s.ranks[len(c.s.ranks)-1] }
func (c *collector) Node(ref, parent, shard uint32, key uint64, depth uint32) error {
	rd := c.rank()
	rd.nodes = append(rd.nodes, nodeRec{ref, parent, shard, key, depth})
	return nil
}
func (c *collector) Binding(eh uint64, ref uint32, copies [kv.NumTiers]uint8) error {
	rd := c.rank()
	rd.bindings = append(rd.bindings, bindRec{eh, ref, copies})
	return nil
}
func (c *collector) EndRank() error { return nil }

// nopVisitor keeps nothing.
type nopVisitor struct{}

func (nopVisitor) Geometry(Geometry) error                          { return nil }
func (nopVisitor) BeginRank(kv.WorkerRank, Stream) error            { return nil }
func (nopVisitor) Node(_, _, _ uint32, _ uint64, _ uint32) error    { return nil }
func (nopVisitor) Binding(uint64, uint32, [kv.NumTiers]uint8) error { return nil }
func (nopVisitor) EndRank() error                                   { return nil }

// decode reads a whole snapshot.
func decode(b []byte) (snapData, Counts, error) {
	var c collector
	n, err := ReadSnapshot(bytes.NewReader(b), &c)
	return c.s, n, err
}

// verify reads a whole snapshot, keeping nothing.
func verify(b []byte) error {
	_, err := ReadSnapshot(bytes.NewReader(b), nopVisitor{})
	return err
}

// genSnap generates a valid snapshot of n ranks, each with up to maxNodes
// new nodes and maxBindings bindings, with every encoding case: chains,
// parents further back, segment starts (at depths up to the deepest),
// bindings of the next, the same, a later and an earlier node, of nodes of
// earlier ranks, several engine hashes per node, one copy, one on several
// tiers and explicit counts, empty ranks and streams.
func genSnap(r *rand.Rand, n, maxNodes, maxBindings int) snapData {
	s := snapData{g: Geometry{Shards: 1 + uint32(r.IntN(8)), SegmentBlocks: uint32(r.IntN(100))}}
	var all []nodeRec
	for i := range n {
		rd := rankData{key: kv.WorkerRank{ID: fmt.Sprintf("w%d", r.IntN(3)), DPRank: uint32(i + 1000*r.IntN(100))}}
		if r.IntN(4) > 0 {
			rd.stream = Stream{HasSeq: true, Seq: r.Uint64() >> r.IntN(64), Sum: r.Uint64(), Epoch: fmt.Sprintf("epoch-%d", r.IntN(3))}
		}
		for range r.IntN(maxNodes + 1) {
			ref := uint32(len(all))
			nd := nodeRec{ref: ref, parent: NoRef, key: r.Uint64() >> (r.IntN(2) * 60)}
			switch p := r.IntN(10); {
			case ref == 0 || p == 0:
			case p < 7:
				nd.parent = ref - 1
			default:
				nd.parent = uint32(r.IntN(int(ref)))
			}
			if nd.parent != NoRef && all[nd.parent].depth == math.MaxUint32 {
				nd.parent = NoRef
			}
			if nd.parent == NoRef {
				nd.shard = uint32(r.IntN(int(s.g.Shards)))
				nd.depth = []uint32{0, 64, 128, r.Uint32() >> r.IntN(32), math.MaxUint32 - uint32(r.IntN(2))}[r.IntN(5)]
			} else {
				nd.shard, nd.depth = all[nd.parent].shard, all[nd.parent].depth+1
			}
			all = append(all, nd)
			rd.nodes = append(rd.nodes, nd)
		}
		if len(all) > 0 {
			ref := uint32(r.IntN(len(all)))
			for range r.IntN(maxBindings + 1) {
				switch m := r.IntN(20); {
				case m < 10:
					ref = min(ref+1, uint32(len(all)-1))
				case m < 13: // the same node again
				case m < 17:
					ref = uint32(r.IntN(len(all)))
				case m < 19:
					ref = min(ref+uint32(r.IntN(300)), uint32(len(all)-1))
				default:
					ref -= min(ref, uint32(r.IntN(5)))
				}
				b := bindRec{eh: r.Uint64() >> (r.IntN(2) * 60), ref: ref}
				switch c := r.IntN(10); {
				case c < 6:
					b.copies = OneCopy(kv.Tier(r.IntN(int(kv.NumTiers))))
				case c < 8:
					for t := range b.copies {
						b.copies[t] = uint8(r.IntN(2))
					}
				default:
					for t := range b.copies {
						b.copies[t] = uint8(r.IntN(2) * r.IntN(maxCopies+1))
					}
				}
				if b.copies == [kv.NumTiers]uint8{} {
					b.copies[kv.TierDisk] = 2
				}
				rd.bindings = append(rd.bindings, b)
			}
		}
		s.ranks = append(s.ranks, rd)
	}
	return s
}

func countOf(s snapData) Counts {
	c := Counts{Ranks: uint64(len(s.ranks))}
	for _, rd := range s.ranks {
		c.Nodes += uint64(len(rd.nodes))
		c.Bindings += uint64(len(rd.bindings))
	}
	return c
}

func equalSnap(a, b snapData) error {
	if a.g != b.g {
		return fmt.Errorf("geometry %+v, want %+v", a.g, b.g)
	}
	if len(a.ranks) != len(b.ranks) {
		return fmt.Errorf("%d ranks, want %d", len(a.ranks), len(b.ranks))
	}
	for i := range a.ranks {
		x, y := a.ranks[i], b.ranks[i]
		if x.key != y.key || x.stream != y.stream || len(x.nodes) != len(y.nodes) || len(x.bindings) != len(y.bindings) {
			return fmt.Errorf("rank %d: %v %+v %d nodes %d bindings, want %v %+v %d %d", i,
				x.key, x.stream, len(x.nodes), len(x.bindings), y.key, y.stream, len(y.nodes), len(y.bindings))
		}
		if j := firstDiff(x.nodes, y.nodes); j >= 0 {
			return fmt.Errorf("rank %d node %d: %+v, want %+v", i, j, x.nodes[j], y.nodes[j])
		}
		if j := firstDiff(x.bindings, y.bindings); j >= 0 {
			return fmt.Errorf("rank %d binding %d: %+v, want %+v", i, j, x.bindings[j], y.bindings[j])
		}
	}
	return nil
}

func firstDiff[T comparable](a, b []T) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// smallSnapshot is a snapshot of 405 bytes covering every record kind:
// segment starts, chains and parents further back, a rank with no node
// and ranks with no seq, bindings of the next, the same, a later and an
// earlier node, one copy, one on several tiers and explicit counts (the
// seed is the first that has them all).
func smallSnapshot(t testing.TB) (snapData, []byte) {
	s := genSnap(rand.New(rand.NewPCG(3, 2)), 4, 8, 10)
	return s, encode(t, s)
}

// frameEnds returns the offsets of the file header's end and of every
// frame's end in a snapshot or journal: its section boundaries.
func frameEnds(b []byte) []int {
	ends := []int{fileHeaderLen}
	for off := fileHeaderLen; off+frameHeaderLen <= len(b); {
		n := int(b[off+1]) | int(b[off+2])<<8 | int(b[off+3])<<16 | int(b[off+4])<<24
		off += frameHeaderLen + n
		ends = append(ends, off)
	}
	return ends
}

// recordsFile frames records as the one data frame of a snapshot of
// geometry g, with valid checksums and a trailer with the counts the
// records hold (as far as they decode), so that what the reader sees is
// the records.
func recordsFile(g Geometry, records []byte) []byte {
	file := appendFileHeader(nil, snapshotMagic, snapshotVersion)
	p := binary.AppendUvarint([]byte{byte(kv.NumTiers)}, uint64(g.Shards))
	file = appendFrame(file, frameHead, binary.AppendUvarint(p, uint64(g.SegmentBlocks)))
	if len(records) > 0 {
		file = appendFrame(file, frameData, records)
	}
	c, _ := ReadSnapshot(bytes.NewReader(slices.Concat(file, appendFrame(nil, frameTrailer, make([]byte, 7)))), nopVisitor{})
	t := binary.AppendUvarint(nil, c.Ranks)
	t = binary.AppendUvarint(t, c.Nodes)
	t = binary.AppendUvarint(t, c.Bindings)
	t = binary.LittleEndian.AppendUint32(t, crc(file))
	return appendFrame(file, frameTrailer, t)
}
