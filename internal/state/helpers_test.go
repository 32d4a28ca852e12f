package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// rankData is one rank of a snapshot, as written or read.
type rankData struct {
	key    kv.WorkerRank
	stream Stream
	blocks []Block
}

// encode writes ranks as a snapshot with dictionary limit maxDict.
func encode(t testing.TB, ranks []rankData, maxDict int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := newWriter(&buf, maxDict)
	for _, rd := range ranks {
		if err := w.BeginRank(rd.key, rd.stream); err != nil {
			t.Fatal(err)
		}
		for _, b := range rd.blocks {
			if err := w.Block(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.EndRank(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// decode reads a whole snapshot.
func decode(b []byte) ([]rankData, Counts, error) {
	r, err := NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, Counts{}, err
	}
	var out []rankData
	for r.NextRank() {
		key, s := r.Rank()
		rd := rankData{key: key, stream: s}
		for r.NextBlock() {
			rd.blocks = append(rd.blocks, r.Block())
		}
		out = append(out, rd)
	}
	return out, r.Counts(), r.Err()
}

// genRanks generates n ranks of random forests whose router block hashes
// repeat across ranks (a child's hash is one of a few per parent hash, so
// paths recur), with every encoding case: explicit parents, roots,
// placeholders, several copies and tiers, empty ranks and streams.
func genRanks(r *rand.Rand, n, maxBlocks int) []rankData {
	ranks := make([]rankData, 0, n)
	for i := range n {
		rd := rankData{key: kv.WorkerRank{ID: fmt.Sprintf("w%d", r.IntN(n+1)), DPRank: uint32(i)}}
		if r.IntN(4) > 0 {
			rd.stream = Stream{HasSeq: true, Seq: r.Uint64() >> r.IntN(64), Epoch: fmt.Sprintf("epoch-%d", r.IntN(3))}
		}
		nb := r.IntN(maxBlocks + 1)
		for j := range nb {
			b := Block{Parent: NoParent, EngineHash: r.Uint64() >> (r.IntN(2) * 60)}
			branch := uint64(r.IntN(3))
			switch p := r.IntN(10); {
			case j == 0 || p == 0:
				b.BlockHash = fmix64(branch + 1)
			case p < 7:
				b.Parent = int32(j - 1)
			default:
				b.Parent = int32(r.IntN(j))
			}
			if b.Parent != NoParent {
				b.BlockHash = fmix64(rd.blocks[b.Parent].BlockHash ^ branch)
			}
			if r.IntN(10) == 0 {
				b.BlockHash = r.Uint64() >> (r.IntN(2) * 60)
			}
			switch c := r.IntN(10); {
			case c < 6:
				b.Copies = OneCopy(kv.Tier(r.IntN(int(kv.NumTiers))))
			case c < 7:
				for t := range b.Copies {
					b.Copies[t] = uint8(r.IntN(2))
				}
			case c < 9:
				for t := range b.Copies {
					b.Copies[t] = uint8(r.IntN(4) * r.IntN(90))
				}
			}
			if b.Placeholder() {
				b.EngineHash = 0
			}
			rd.blocks = append(rd.blocks, b)
		}
		ranks = append(ranks, rd)
	}
	// Rank keys are unique.
	seen := map[kv.WorkerRank]bool{}
	out := ranks[:0]
	for _, rd := range ranks {
		if !seen[rd.key] {
			seen[rd.key] = true
			out = append(out, rd)
		}
	}
	return out
}

func countOf(ranks []rankData) Counts {
	c := Counts{Ranks: uint64(len(ranks))}
	for _, rd := range ranks {
		for _, b := range rd.blocks {
			c.Blocks++
			if !b.Placeholder() {
				c.Residencies++
			}
		}
	}
	return c
}

func equalRanks(a, b []rankData) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d ranks, want %d", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.key != y.key || x.stream != y.stream || len(x.blocks) != len(y.blocks) {
			return fmt.Errorf("rank %d: %v %+v %d blocks, want %v %+v %d", i, x.key, x.stream, len(x.blocks), y.key, y.stream, len(y.blocks))
		}
		for j := range x.blocks {
			if x.blocks[j] != y.blocks[j] {
				return fmt.Errorf("rank %d block %d: %+v, want %+v", i, j, x.blocks[j], y.blocks[j])
			}
		}
	}
	return nil
}

// smallSnapshot is a snapshot of a few hundred bytes covering every record kind.
func smallSnapshot(t testing.TB) ([]rankData, []byte) {
	ranks := genRanks(rand.New(rand.NewPCG(3, 4)), 4, 12)
	return ranks, encode(t, ranks, defaultMaxDict)
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

// verify reads a whole snapshot, keeping nothing.
func verify(b []byte) error {
	r, err := NewReader(bytes.NewReader(b))
	if err != nil {
		return err
	}
	for r.NextRank() {
		for r.NextBlock() {
		}
	}
	return r.Err()
}
