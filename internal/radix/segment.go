package radix

import (
	"math/bits"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// shardOf picks the shard of a segment by the path key of its first node.
//
// Sharding by segment rather than by a prompt's first block keeps writers
// apart when every prompt starts alike (one chat template or system prompt,
// which would put the whole index in one shard): only the segments inside
// such a shared prefix share a shard, and their nodes are the popular ones,
// rarely stored or evicted.
func (ix *Index) shardOf(k uint64) int {
	if ix.shift == 64 {
		return 0
	}
	return int(kv.Mix(k^0x2545f4914f6cdd1d) >> ix.shift)
}

// segmentEnd returns the depth at which the segment holding depth d ends:
// where the next one starts (see Config.SegmentBlocks).
func (ix *Index) segmentEnd(d uint32) uint64 {
	return uint64(ix.seg) << bits.Len32(d/ix.seg)
}

// segmentStart reports whether a segment starts at depth d.
func (ix *Index) segmentStart(d uint32) bool {
	return d == 0 || ix.segmentEnd(d-1) == uint64(d)
}
