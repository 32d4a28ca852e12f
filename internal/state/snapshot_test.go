package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestSnapshotRoundTrip writes random forests and reads them back equal,
// with the default dictionary and with a tiny one that fills up.
func TestSnapshotRoundTrip(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 9))
		ranks := genRanks(r, 1+r.IntN(12), []int{0, 3, 40, 600}[seed%4])
		maxDict := defaultMaxDict
		if seed%3 == 0 {
			maxDict = r.IntN(20)
		}
		b := encode(t, ranks, maxDict)
		got, c, err := decode(b)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err := equalRanks(got, ranks); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if want := countOf(ranks); c != want {
			t.Fatalf("seed %d: counts %+v, want %+v", seed, c, want)
		}
	}
}

// TestSnapshotEmpty: no ranks is a valid snapshot.
func TestSnapshotEmpty(t *testing.T) {
	got, c, err := decode(encode(t, nil, defaultMaxDict))
	if err != nil || len(got) != 0 || c != (Counts{}) {
		t.Fatalf("got %v %+v %v", got, c, err)
	}
}

// TestSnapshotEncoding pins the common cases' sizes: a block on a path
// already written costs its lead byte and engine hash.
func TestSnapshotEncoding(t *testing.T) {
	path := func(id string, n int) rankData {
		rd := rankData{key: kv.WorkerRank{ID: id}}
		for i := range n {
			b := Block{Parent: int32(i - 1), BlockHash: uint64(1000 + i), EngineHash: rand.Uint64(), Copies: OneCopy(kv.TierDevice)}
			if i == 0 {
				b.Parent = NoParent
			}
			rd.blocks = append(rd.blocks, b)
		}
		return rd
	}
	one := len(encode(t, []rankData{path("a", 100)}, defaultMaxDict))
	two := len(encode(t, []rankData{path("a", 100), path("b", 100)}, defaultMaxDict))
	if perBlock := float64(two-one-8-2) / 100; perBlock != 9 { // the rank's records, the trailer's longer counts
		t.Fatalf("a repeated path costs %.2f bytes per block, want 9 (%d, %d)", perBlock, one, two)
	}
	if perBlock := float64(one) / 100; perBlock > 17+1 {
		t.Fatalf("a new path costs %.2f bytes per block", perBlock)
	}
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
	ranks := genRanks(rand.New(rand.NewPCG(5, 6)), 12, 2000)
	big := encode(t, ranks, defaultMaxDict)
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
		if n >= fileHeaderLen && slicesContains(ends, n) && !errors.Is(err, ErrTruncated) {
			t.Fatalf("cut at frame boundary %d: %v, want truncated", n, err)
		}
	}
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
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
	ranks := genRanks(rand.New(rand.NewPCG(5, 6)), 20, 3000)
	b := encode(t, ranks, defaultMaxDict)
	ends := frameEnds(b)
	frame := func(i int) []byte { return b[ends[i]:ends[i+1]] } // frame i+1 (0 is the head)
	last := len(ends) - 2                                       // the trailer
	var cases [][]byte
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases = append(cases,
		cat(b[:ends[2]], b[ends[3]:]),                     // drop a data frame
		cat(b[:ends[3]], frame(2), b[ends[3]:]),           // repeat one
		cat(b[:ends[2]], frame(3), frame(2), b[ends[4]:]), // swap two
		cat(b[:ends[last]], frame(last), frame(last)),     // two trailers
		cat(b, []byte{0}),                                 // garbage after the end
		cat(b[:ends[1]], frame(last)),                     // only the trailer
	)
	for i, c := range cases {
		if _, _, err := decode(c); !IsBadFile(err) {
			t.Fatalf("case %d: %v", i, err)
		}
	}
}

// TestSnapshotFutureVersion: a well-formed header of version 2 is refused
// as a future version, by its number.
func TestSnapshotFutureVersion(t *testing.T) {
	_, b := smallSnapshot(t)
	c := bytes.Clone(b)
	binary.LittleEndian.PutUint32(c[8:], 2)
	binary.LittleEndian.PutUint32(c[12:], crc(c[:12]))
	_, _, err := decode(c)
	if !errors.Is(err, ErrFutureVersion) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("got %v", err)
	}
	if _, _, err := decode([]byte("not a snapshot at all")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong magic: %v", err)
	}
}

// TestSnapshotReaderSkips: a caller that skips blocks or ranks still gets
// the file verified, and a bad file still fails.
func TestSnapshotReaderSkips(t *testing.T) {
	ranks, b := smallSnapshot(t)
	for _, bad := range []bool{false, true} {
		c := bytes.Clone(b)
		if bad {
			c[len(c)/2] ^= 1
		}
		r, err := NewReader(bytes.NewReader(c))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for r.NextRank() {
			n++
			r.NextBlock() // read one block at most
		}
		if bad != IsBadFile(r.Err()) || (!bad && n != len(ranks)) {
			t.Fatalf("bad %v: %d ranks, %v", bad, n, r.Err())
		}
		if r.NextRank() || r.NextBlock() {
			t.Fatal("reader goes on after its end")
		}
	}
}

// TestSnapshotWriterMisuse: the writer refuses what it cannot encode, and
// the error sticks.
func TestSnapshotWriterMisuse(t *testing.T) {
	k := kv.WorkerRank{ID: "w"}
	for name, f := range map[string]func(w *Writer) error{
		"block outside rank": func(w *Writer) error { return w.Block(Block{Parent: NoParent}) },
		"end outside rank":   func(w *Writer) error { return w.EndRank() },
		"parent ahead": func(w *Writer) error {
			w.BeginRank(k, Stream{})
			return w.Block(Block{Parent: 0})
		},
		"negative parent": func(w *Writer) error {
			w.BeginRank(k, Stream{})
			w.Block(Block{Parent: NoParent})
			return w.Block(Block{Parent: -2})
		},
		"rank twice": func(w *Writer) error {
			w.BeginRank(k, Stream{})
			w.EndRank()
			return w.BeginRank(k, Stream{})
		},
		"nested rank": func(w *Writer) error {
			w.BeginRank(k, Stream{})
			return w.BeginRank(kv.WorkerRank{ID: "x"}, Stream{})
		},
		"empty id":   func(w *Writer) error { return w.BeginRank(kv.WorkerRank{}, Stream{}) },
		"long epoch": func(w *Writer) error { return w.BeginRank(k, Stream{Epoch: strings.Repeat("e", maxField+1)}) },
		"close in rank": func(w *Writer) error {
			w.BeginRank(k, Stream{})
			return w.Close()
		},
	} {
		w := NewWriter(&bytes.Buffer{})
		if err := f(w); err == nil {
			t.Fatalf("%s: no error", name)
		}
		if w.Close() == nil {
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
	ranks := genRanks(rand.New(rand.NewPCG(5, 6)), 10, 3000)
	full := len(encode(t, ranks, defaultMaxDict))
	for _, n := range []int{0, 10, 100, full / 2, full - 1} {
		w := NewWriter(&failAfter{n: n, err: errors.New("boom")})
		var err error
		for _, rd := range ranks {
			w.BeginRank(rd.key, rd.stream)
			for _, b := range rd.blocks {
				w.Block(b)
			}
			w.EndRank()
		}
		err = w.Close()
		if err == nil || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("fail after %d: %v", n, err)
		}
	}
}
