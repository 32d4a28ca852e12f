package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestSnapshotRoundTrip writes random valid record streams and reads them
// back equal.
func TestSnapshotRoundTrip(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 9))
		size := []int{0, 3, 40, 600}[seed%4]
		s := genSnap(r, 1+r.IntN(12), size, 2*size)
		got, c, err := decode(encode(t, s))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err := equalSnap(got, s); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if want := countOf(s); c != want {
			t.Fatalf("seed %d: counts %+v, want %+v", seed, c, want)
		}
	}
}

// TestSnapshotEmpty: no ranks is a valid snapshot, and so is an empty rank.
func TestSnapshotEmpty(t *testing.T) {
	for _, s := range []snapData{{}, {g: Geometry{Shards: 3, SegmentBlocks: 64}, ranks: []rankData{{key: kv.WorkerRank{ID: "w"}}}}} {
		got, c, err := decode(encode(t, s))
		if err != nil || equalSnap(got, s) != nil || c != countOf(s) {
			t.Fatalf("got %+v %+v %v", got, c, err)
		}
	}
}

// payload is the total size of a snapshot's data frames' payloads.
func payload(b []byte) int {
	n := 0
	ends := frameEnds(b)
	for i := 1; i < len(ends)-2; i++ {
		n += ends[i+1] - ends[i] - frameHeaderLen
	}
	return n
}

// TestSnapshotEncoding pins the records' sizes (see the format).
func TestSnapshotEncoding(t *testing.T) {
	g := Geometry{Shards: 4, SegmentBlocks: 64}
	dev := OneCopy(kv.TierDevice)
	// Rank a: a chain of 100 nodes from a segment start, each bound once.
	a := rankData{key: kv.WorkerRank{ID: "a"}}
	for i := range uint32(100) {
		n := nodeRec{ref: i, parent: i - 1, shard: 1, key: rand.Uint64(), depth: 64 + i}
		if i == 0 {
			n.parent = NoRef
		}
		a.nodes = append(a.nodes, n)
		a.bindings = append(a.bindings, bindRec{eh: rand.Uint64(), ref: i, copies: dev})
	}
	// Rank b binds the same nodes.
	b := rankData{key: kv.WorkerRank{ID: "b"}, bindings: slices.Clone(a.bindings)}
	base := []rankData{a, b}
	begin, end := 6, 3 // rank "x", dp 0, no seq, no epoch; end with counts < 128
	if got, want := payload(encode(t, snapData{g, base})), 2*(begin+end)+(1+1+1+8)+99*9+200*9; got != want {
		t.Fatalf("a chain and its bindings: %d bytes, want %d", got, want)
	}
	size := func(rd rankData) int {
		rd.key = kv.WorkerRank{ID: "c"}
		return payload(encode(t, snapData{g, append(slices.Clone(base), rd)})) - payload(encode(t, snapData{g, base})) - begin - end
	}
	for _, tc := range []struct {
		name string
		b    bindRec
		n    int
	}{
		{"next", bindRec{ref: 1, copies: dev}, 9},
		{"same", bindRec{ref: 0, copies: dev}, 9},
		{"ahead", bindRec{ref: 50, copies: dev}, 10},
		{"far ahead", bindRec{ref: 99, copies: dev}, 11},
		{"one copy on two tiers", bindRec{ref: 1, copies: [kv.NumTiers]uint8{1, 1, 0, 0}}, 9},
		{"two copies", bindRec{ref: 1, copies: [kv.NumTiers]uint8{2, 0, 0, 0}}, 11},
		{"counts on three tiers", bindRec{ref: 1, copies: [kv.NumTiers]uint8{2, 3, 0, 63}}, 13},
	} {
		if got := size(rankData{bindings: []bindRec{tc.b}}); got != tc.n {
			t.Errorf("binding %s: %d bytes, want %d", tc.name, got, tc.n)
		}
	}
	for _, tc := range []struct {
		name string
		n    nodeRec
		size int
	}{
		{"chain", nodeRec{ref: 100, parent: 99, shard: 1, depth: 164}, 9},
		{"back", nodeRec{ref: 100, parent: 98, shard: 1, depth: 163}, 10},
		{"back far", nodeRec{ref: 100, parent: 0, shard: 1, depth: 65}, 10},
		{"segment start", nodeRec{ref: 100, parent: NoRef, shard: 3, depth: 64}, 11},
		{"deep segment start", nodeRec{ref: 100, parent: NoRef, shard: 3, depth: 1024}, 12},
	} {
		if got := size(rankData{nodes: []nodeRec{tc.n}}); got != tc.size {
			t.Errorf("node %s: %d bytes, want %d", tc.name, got, tc.size)
		}
	}
	// A segment start (2 bytes over a chain node's 9) and 127 nodes in
	// chain; the rank end's node count takes 2 bytes.
	if got, want := size(rankData{nodes: chainOf(100, 128)}), 128*9+2+1; got != want {
		t.Errorf("128 nodes: %d bytes, want %d", got, want)
	}
}

// chainOf is a chain of n nodes from ref first, a segment start.
func chainOf(first, n uint32) []nodeRec {
	var out []nodeRec
	for i := range n {
		out = append(out, nodeRec{ref: first + i, parent: first + i - 1, depth: i})
	}
	out[0].parent = NoRef
	return out
}

// TestSnapshotTruncated cuts a small file at every offset and a large one
// (many frames) at every frame boundary, next to it, and at random offsets:
// every cut is refused, as truncated or corrupt, never read as whole.
func TestSnapshotTruncated(t *testing.T) {
	_, small := smallSnapshot(t)
	for n := range len(small) {
		if err := verify(small[:n]); !IsBadFile(err) {
			t.Fatalf("cut at %d of %d: %v", n, len(small), err)
		}
	}
	big := encode(t, genSnap(rand.New(rand.NewPCG(5, 6)), 12, 2000, 3000))
	cuts := []int{}
	ends := frameEnds(big)
	if len(ends) < 5 {
		t.Fatalf("only %d frames", len(ends)-1)
	}
	for _, e := range ends[:len(ends)-1] {
		cuts = append(cuts, e-1, e, e+1, e+frameHeaderLen)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		cuts = append(cuts, r.IntN(len(big)))
	}
	for _, n := range cuts {
		err := verify(big[:n])
		if !IsBadFile(err) {
			t.Fatalf("cut at %d of %d: %v", n, len(big), err)
		}
		if n >= fileHeaderLen && slices.Contains(ends, n) && !errors.Is(err, ErrTruncated) {
			t.Fatalf("cut at frame boundary %d: %v, want truncated", n, err)
		}
	}
}

// TestSnapshotEveryByteFlip changes every byte of a small snapshot to every
// other value: each is refused.
func TestSnapshotEveryByteFlip(t *testing.T) {
	_, b := smallSnapshot(t)
	t.Logf("%d bytes", len(b))
	c := bytes.Clone(b)
	for i := range c {
		for x := 1; x < 256; x++ {
			c[i] = b[i] ^ byte(x)
			if err := verify(c); !IsBadFile(err) {
				t.Fatalf("byte %d ^ %#02x: %v", i, x, err)
			}
		}
		c[i] = b[i]
	}
}

// TestSnapshotFrameSwap: frames each valid but dropped, repeated or
// swapped are refused (the trailer's file checksum).
func TestSnapshotFrameSwap(t *testing.T) {
	b := encode(t, genSnap(rand.New(rand.NewPCG(5, 6)), 20, 2000, 3000))
	ends := frameEnds(b)
	frame := func(i int) []byte { return b[ends[i]:ends[i+1]] } // frame i+1 (0 is the head)
	last := len(ends) - 2                                       // the trailer
	for i, c := range [][]byte{
		cat(b[:ends[2]], b[ends[3]:]),                     // drop a data frame
		cat(b[:ends[3]], frame(2), b[ends[3]:]),           // repeat one
		cat(b[:ends[2]], frame(3), frame(2), b[ends[4]:]), // swap two
		cat(b[:ends[last]], frame(last), frame(last)),     // two trailers
		cat(b, []byte{0}),                                 // garbage after the end
		cat(b[:ends[1]], frame(last)),                     // only the trailer
		cat(b[:ends[0]], frame(1), b[ends[1]:]),           // two heads
	} {
		if _, _, err := decode(c); !IsBadFile(err) {
			t.Fatalf("case %d: %v", i, err)
		}
	}
}

// TestSnapshotVersions: a well-formed header of a later version is refused
// as a future version, of version 1 (never released) as corrupt, both by
// number.
func TestSnapshotVersions(t *testing.T) {
	_, b := smallSnapshot(t)
	for _, tc := range []struct {
		v    uint32
		kind error
	}{{3, ErrFutureVersion}, {1, ErrCorrupt}, {0, ErrCorrupt}} {
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint32(c[8:], tc.v)
		binary.LittleEndian.PutUint32(c[12:], crc(c[:12]))
		_, _, err := decode(c)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), "version") {
			t.Fatalf("version %d: %v", tc.v, err)
		}
	}
	if _, _, err := decode([]byte("not a snapshot at all")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong magic: %v", err)
	}
}

// failVisitor fails its n-th call.
type failVisitor struct {
	collector
	n   int
	err error
}

func (f *failVisitor) call() error {
	if f.n--; f.n == 0 {
		return f.err
	}
	return nil
}
func (f *failVisitor) Geometry(g Geometry) error {
	return errors.Join(f.call(), f.collector.Geometry(g))
}
func (f *failVisitor) BeginRank(k kv.WorkerRank, s Stream) error {
	return errors.Join(f.call(), f.collector.BeginRank(k, s))
}
func (f *failVisitor) Node(ref, parent, shard uint32, key uint64, depth uint32) error {
	return f.call()
}
func (f *failVisitor) Binding(eh uint64, ref uint32, copies [kv.NumTiers]uint8) error {
	return f.call()
}
func (f *failVisitor) EndRank() error { return f.call() }

// TestSnapshotVisitorError: a visitor's error stops the read at once and is
// returned, wrapped with an offset, as not a bad file (unless it says so).
func TestSnapshotVisitorError(t *testing.T) {
	s, b := smallSnapshot(t)
	c := countOf(s)
	calls := int(1 + 2*c.Ranks + c.Nodes + c.Bindings)
	boom := errors.New("index full")
	for n := 1; n <= calls; n++ {
		v := &failVisitor{n: n, err: boom}
		_, err := ReadSnapshot(bytes.NewReader(b), v)
		if !errors.Is(err, boom) || IsBadFile(err) || !strings.HasPrefix(err.Error(), "offset ") || v.n != 0 {
			t.Fatalf("fail at call %d of %d: %v (%d calls left)", n, calls, err, -v.n)
		}
	}
	v := &failVisitor{n: calls / 2, err: formatErr(ErrCorrupt, 0, "a node twice")}
	if _, err := ReadSnapshot(bytes.NewReader(b), v); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("visitor refusing the file: %v", err)
	}
}

// Records, for hand-made snapshots.
func recBegin(id string) []byte {
	return append(appendString([]byte{recRankBegin}, id), 0, 0, 0)
}
func recEnd(nodes, bindings uint64) []byte {
	return binary.AppendUvarint(binary.AppendUvarint([]byte{recRankEnd}, nodes), bindings)
}
func recStart(shard, depth uint64) []byte {
	return binary.AppendUvarint(binary.AppendUvarint([]byte{recNodeStart}, shard), depth)
}
func recKey(lead ...byte) []byte { return append(lead, 1, 2, 3, 4, 5, 6, 7, 8) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func bind(lead byte, rest ...byte) []byte { return recKey(append([]byte{lead}, rest...)...) }

// handRecords are valid records of two ranks with every record kind, for
// a geometry of 2 shards or more.
func handRecords() []byte {
	return cat(recBegin("a"), recKey(recStart(1, 5)...), recKey(recNodeChain), recKey(recNodeBack, 0), recKey(recStart(0, math.MaxUint32)...),
		bind(0x11), bind(0x10), bind(0x12, 1), bind(0x01, 0x9, 2, 63), bind(0x81), recEnd(4, 5),
		recBegin("b"), bind(0x80), recEnd(0, 1))
}

// TestSnapshotReaderRefuses: records that break the format, behind valid
// checksums, are refused as corrupt with their offset.
func TestSnapshotReaderRefuses(t *testing.T) {
	g := Geometry{Shards: 2, SegmentBlocks: 64}
	one := cat(recBegin("a"), recKey(recStart(1, 5)...)) // a rank open with node 0
	if got, _, err := decode(recordsFile(g, handRecords())); err != nil {
		t.Fatalf("valid records: %v", err)
	} else if n := got.ranks[0].nodes[2]; n.parent != 0 || n.shard != 1 || n.depth != 6 {
		t.Fatalf("node 2: %+v", n)
	} else if b := got.ranks[0].bindings; b[2].ref != 0 || b[3].copies != [kv.NumTiers]uint8{2, 0, 0, 63} || b[4].copies != OneCopy(kv.TierExternal) {
		t.Fatalf("bindings %+v", b)
	}
	for name, records := range map[string][]byte{
		"node outside a rank":      recKey(recStart(0, 0)...),
		"first node with a parent": cat(recBegin("a"), recKey(recNodeChain)),
		"back before the first":    cat(one, recKey(recNodeBack, 0)),
		"back too far":             cat(one, recKey(recStart(0, 0)...), recKey(recNodeBack, 1)),
		"shard over":               cat(recBegin("a"), recKey(recStart(2, 0)...)),
		"shard over 32 bits":       cat(recBegin("a"), recKey(recStart(1<<32, 0)...)),
		"depth over 32 bits":       cat(recBegin("a"), recKey(recStart(0, 1<<32)...)),
		"child of the deepest":     cat(recBegin("a"), recKey(recStart(0, math.MaxUint32)...), recKey(recNodeChain)),
		"node cut short":           cat(one, []byte{recNodeChain, 1, 2, 3}),
		"node after a binding":     cat(one, bind(0x11), recKey(recNodeChain)),
		"binding outside a rank":   cat(one, recEnd(1, 0), bind(0x11)),
		"binding of no node":       cat(recBegin("a"), bind(0x11)),
		"binding ahead":            cat(one, bind(0x10)),
		"binding before 0":         cat(one, bind(0x12, 1)),
		"delta 0":                  cat(one, bind(0x12, 0)),
		"delta 1":                  cat(one, recKey(recNodeChain), bind(0x12, 2)),
		"bad delta varint":         cat(one, bind(0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)),
		"tier mask 0":              cat(one, bind(0x01, 0)),
		"tier mask 16":             cat(one, bind(0x01, 0x10, 2)),
		"copy count 0":             cat(one, bind(0x01, 3, 2, 0)),
		"copy count 64":            cat(one, bind(0x01, 1, 64)),
		"explicit ones":            cat(one, bind(0x01, 3, 1, 1)),
		"binding cut short":        cat(one, []byte{0x11, 1, 2, 3, 4, 5, 6, 7}),
		"rank end miscounts":       cat(one, recEnd(0, 0)),
		"rank end cut short":       cat(one, []byte{recRankEnd, 1}),
		"rank end outside a rank":  recEnd(0, 0),
		"rank in a rank":           cat(one, recBegin("b")),
		"rank twice":               cat(recBegin("a"), recEnd(0, 0), recBegin("a")),
		"empty worker id":          recBegin(""),
		"stream flags":             cat(appendString([]byte{recRankBegin}, "a"), []byte{0, 2, 0}),
		"trailer in a rank":        one,
		"lead 0x08":                cat(one, recKey(0x08)),
		"lead 0x0f":                cat(one, recKey(0x0f)),
		"lead 0x13":                cat(one, recKey(0x13)),
		"lead 0x17":                cat(one, recEnd(1, 0), []byte{0x17, 0, 0}),
	} {
		_, _, err := decode(recordsFile(g, records))
		if !errors.Is(err, ErrCorrupt) || !strings.HasPrefix(err.Error(), "offset ") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestSnapshotBadFrames: frames that break the format, with valid
// checksums, are refused as corrupt.
func TestSnapshotBadFrames(t *testing.T) {
	header := appendFileHeader(nil, snapshotMagic, snapshotVersion)
	head := func(p ...byte) []byte { return appendFrame(bytes.Clone(header), frameHead, p) }
	good := head(byte(kv.NumTiers), 2, 64)
	// trailer ends file with a trailer of counts c and a right checksum.
	trailer := func(file []byte, c ...byte) []byte {
		return appendFrame(file, frameTrailer, binary.LittleEndian.AppendUint32(c, crc(file)))
	}
	if err := verify(trailer(bytes.Clone(good), 0, 0, 0)); err != nil {
		t.Fatalf("valid: %v", err)
	}
	for name, file := range map[string][]byte{
		"head cut short":        trailer(head(byte(kv.NumTiers), 2), 0, 0, 0),
		"head too long":         trailer(head(byte(kv.NumTiers), 2, 64, 0), 0, 0, 0),
		"shards over 32 bits":   trailer(head(byte(kv.NumTiers), 0x80, 0x80, 0x80, 0x80, 0x10, 64), 0, 0, 0),
		"tiers":                 trailer(head(byte(kv.NumTiers+1), 2, 64), 0, 0, 0),
		"data first":            appendFrame(bytes.Clone(header), frameData, recBegin("a")),
		"empty data frame":      trailer(appendFrame(bytes.Clone(good), frameData, nil), 0, 0, 0),
		"frame of another type": trailer(appendFrame(bytes.Clone(good), 'X', []byte{1}), 0, 0, 0),
		"trailer cut short":     trailer(bytes.Clone(good), 0, 0),
		"trailer too long":      trailer(bytes.Clone(good), 0, 0, 0, 0),
		"trailer counts":        trailer(bytes.Clone(good), 0, 1, 0),
	} {
		if err := verify(file); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestSnapshotWriterMisuse: the writer refuses what breaks the format, and
// the error sticks.
func TestSnapshotWriterMisuse(t *testing.T) {
	k := kv.WorkerRank{ID: "w"}
	dev := OneCopy(kv.TierDevice)
	// open: a rank with nodes 0 (a segment start: shard 1, depth 10) and 1.
	open := func(w *Writer) {
		w.BeginRank(k, Stream{})
		w.Node(0, NoRef, 1, 7, 10)
		w.Node(1, 0, 1, 7, 11)
	}
	for name, f := range map[string]func(w *Writer) error{
		"node outside a rank":    func(w *Writer) error { return w.Node(0, NoRef, 0, 0, 0) },
		"binding outside a rank": func(w *Writer) error { open(w); w.EndRank(); return w.Binding(1, 0, dev) },
		"end outside a rank":     func(w *Writer) error { return w.EndRank() },
		"ref out of order":       func(w *Writer) error { open(w); return w.Node(3, NoRef, 0, 0, 0) },
		"ref again":              func(w *Writer) error { open(w); return w.Node(1, NoRef, 0, 0, 0) },
		"parent ahead":           func(w *Writer) error { open(w); return w.Node(2, 2, 1, 0, 12) },
		"parent itself":          func(w *Writer) error { open(w); return w.Node(2, 3, 1, 0, 12) },
		"child's shard":          func(w *Writer) error { open(w); return w.Node(2, 1, 0, 0, 12) },
		"child's depth":          func(w *Writer) error { open(w); return w.Node(2, 0, 1, 0, 12) },
		"shard over":             func(w *Writer) error { open(w); return w.Node(2, NoRef, 2, 0, 0) },
		"child of the deepest": func(w *Writer) error {
			open(w)
			w.Node(2, NoRef, 0, 0, math.MaxUint32)
			return w.Node(3, 2, 0, 0, 0)
		},
		"node after a binding":   func(w *Writer) error { open(w); w.Binding(1, 1, dev); return w.Node(2, 1, 1, 0, 12) },
		"binding of no node":     func(w *Writer) error { open(w); return w.Binding(1, 2, dev) },
		"binding of NoRef":       func(w *Writer) error { open(w); return w.Binding(1, NoRef, dev) },
		"zero copies":            func(w *Writer) error { open(w); return w.Binding(1, 0, [kv.NumTiers]uint8{}) },
		"64 copies":              func(w *Writer) error { open(w); return w.Binding(1, 0, [kv.NumTiers]uint8{1, 64, 0, 0}) },
		"255 copies":             func(w *Writer) error { open(w); return w.Binding(1, 0, [kv.NumTiers]uint8{255, 0, 0, 0}) },
		"rank twice":             func(w *Writer) error { w.BeginRank(k, Stream{}); w.EndRank(); return w.BeginRank(k, Stream{}) },
		"nested rank":            func(w *Writer) error { w.BeginRank(k, Stream{}); return w.BeginRank(kv.WorkerRank{ID: "x"}, Stream{}) },
		"empty id":               func(w *Writer) error { return w.BeginRank(kv.WorkerRank{}, Stream{}) },
		"long epoch":             func(w *Writer) error { return w.BeginRank(k, Stream{Epoch: strings.Repeat("e", maxField+1)}) },
		"close in rank":          func(w *Writer) error { w.BeginRank(k, Stream{}); return w.Close() },
		"begin rank after close": func(w *Writer) error { w.Close(); return w.BeginRank(k, Stream{}) },
	} {
		w := NewWriter(&bytes.Buffer{}, Geometry{Shards: 2, SegmentBlocks: 64})
		if err := f(w); err == nil {
			t.Fatalf("%s: no error", name)
		}
		if w.Close() == nil || w.EndRank() == nil {
			t.Fatalf("%s: error did not stick", name)
		}
	}
}

// failAfter fails writes once n bytes were written.
type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k := f.n
		f.n = 0
		return k, f.err
	}
	f.n -= len(p)
	return len(p), nil
}

// TestSnapshotWriterWriteError: a failing writer's error is returned.
func TestSnapshotWriterWriteError(t *testing.T) {
	s := genSnap(rand.New(rand.NewPCG(5, 6)), 10, 2000, 3000)
	full := len(encode(t, s))
	for _, n := range []int{0, 10, 100, full / 2, full - 1} {
		w := NewWriter(&failAfter{n: n, err: errors.New("boom")}, s.g)
		writeSnap(w, s.ranks)
		if err := w.Close(); err == nil || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("fail after %d: %v", n, err)
		}
	}
}
