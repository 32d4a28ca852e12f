package radix

import (
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

func TestSegmentBounds(t *testing.T) {
	for _, tc := range []struct {
		seg    int
		starts []uint32 // every segment start below 600
	}{
		{16, []uint32{0, 16, 32, 64, 128, 256, 512}},
		{1, []uint32{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512}},
		{3, []uint32{0, 3, 6, 12, 24, 48, 96, 192, 384}},
	} {
		ix := New(Config{SegmentBlocks: tc.seg})
		var got []uint32
		for d := uint32(0); d < 600; d++ {
			if ix.segmentStart(d) {
				got = append(got, d)
			}
			// segmentEnd is the next start.
			want := d + 1
			for !ix.segmentStart(want) {
				want++
			}
			if e := ix.segmentEnd(d); e != uint64(want) {
				t.Fatalf("segment %d: segmentEnd(%d) = %d, want %d", tc.seg, d, e, want)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.starts) {
			t.Errorf("segment %d: starts %v, want %v", tc.seg, got, tc.starts)
		}
	}
}

// TestSegmentsSpreadSharedPrefix stores conversations behind one shared
// prefix, as a fleet with one chat template or system prompt sees them: by
// segment, their nodes spread over the shards; with one segment per path (as
// when sharding by the first block) they all sit in one.
func TestSegmentsSpreadSharedPrefix(t *testing.T) {
	const convs, shared, length = 64, 20, 100
	for _, tc := range []struct {
		seg       int
		minShards int
		maxShards int
	}{
		{0, 32, DefaultShards}, // (64 segments from depth 64 over 64 shards: about 40)
		{1 << 20, 1, 1},
	} {
		ix := New(Config{SegmentBlocks: tc.seg, CheckInvariants: true})
		for c := range convs {
			w := kv.WorkerRank{ID: fmt.Sprintf("w%d", c)}
			blocks := make([]kv.Block, length)
			for i := range blocks {
				bh := uint64(1000 + i) // the shared prefix
				if i >= shared {
					bh = uint64(c)<<32 | uint64(i)
				}
				blocks[i] = kv.Block{EngineHash: uint64(i + 1), BlockHash: bh}
			}
			if err := ix.Store(w, 0, false, kv.TierDevice, blocks); err != nil {
				t.Fatal(err)
			}
			prompt := make([]uint64, length)
			for i, b := range blocks {
				prompt[i] = b.BlockHash
			}
			if out := ix.Match(prompt, nil); len(out) != c+1 {
				t.Fatalf("segment %d: conversation %d: %d scores, want %d", tc.seg, c, len(out), c+1)
			} else if got := out[c].Matched; got != length {
				t.Fatalf("segment %d: conversation %d matched %d blocks of its own, want %d", tc.seg, c, got, length)
			}
		}
		used := 0
		for _, sh := range ix.shards {
			if sh.live > 0 {
				used++
			}
		}
		if used < tc.minShards || used > tc.maxShards {
			t.Errorf("segment %d: nodes in %d shards, want %d..%d", tc.seg, used, tc.minShards, tc.maxShards)
		}
	}
}
