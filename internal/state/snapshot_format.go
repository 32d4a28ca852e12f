package state

import (
	"github.com/kvrouter/kvrouter/internal/kv"
)

// Snapshot file format, version 2.
//
// A snapshot is the file header (magic "\x89KVRSNP\n", version 2; see
// frame.go) and then frames:
//
//	'H'  first and once: byte number of tiers (kv.NumTiers), uvarint
//	     Shards, uvarint SegmentBlocks (the index geometry, each < 2^32)
//	'D'  data, never empty: records, each wholly inside one frame (the
//	     writer closes a frame once it passes 64 KiB)
//	'T'  last and once: uvarint ranks, uvarint nodes, uvarint bindings,
//	     uint32 CRC32C of every byte of the file before this frame
//
// and nothing after the trailer. Every frame has its own CRC32C (checked
// before its records are decoded) and the trailer's checksum covers the
// whole file, so a cut at any point, a dropped or repeated frame and any
// flipped byte are refused.
//
// Version 1 (each rank a forest of router block hashes) was never
// released: no version 1 file exists, and a version 1 header is refused as
// a version this build does not read (ErrCorrupt).
//
// Records. A rank is a rank begin, its node records, its binding records
// and a rank end (its records may span frames); a rank key appears once.
// Every record starts with a lead byte; m, a binding's high nibble, is its
// copies code (below); every lead byte not listed is invalid:
//
//	lead  record                  then
//	0x06  rank begin              string worker id, uvarint dp rank, byte
//	                              flags (bit 0: has seq, others 0), uvarint
//	                              last applied seq and 8 bytes digest of its
//	                              payload (if has seq), string epoch
//	0x03  node, parent ref-1      key
//	0x04  node, parent ref-2-d    uvarint d, key
//	0x05  node, segment start     uvarint shard, uvarint depth, key
//	0xm0  binding, ref prev+1     [copies], engine hash
//	0xm1  binding, ref prev       [copies], engine hash
//	0xm2  binding, ref prev+Δ     uvarint zigzag(Δ), [copies], engine hash
//	0x07  rank end                uvarint nodes of the rank, uvarint
//	                              bindings of the rank
//
// A string is a uvarint length (at most 4096) and its bytes; a key or an
// engine hash is 8 bytes little endian; zigzag(Δ) is 2Δ for Δ >= 0 and
// -2Δ-1 for Δ < 0; a shard and a depth are < 2^32.
//
// Nodes. Refs number the nodes of the whole file 0, 1, 2, ... in the order
// written: a node is written once, in the first rank that needs it, and
// later ranks refer to it by ref. A node either has a parent, an earlier
// node (in a chain the previous one: no byte), and then it is in its
// parent's shard at its parent's depth + 1 (a node at depth 2^32-1 has no
// child); or it starts a path segment (the index does not know such a
// node's parent), and its shard (< Shards) and depth are written. The ref
// ^0 is NoRef, never a node's.
//
// Bindings. A binding holds one engine hash of the rank on node ref, a
// node written before it (by this rank or an earlier one), with its copies
// per tier. prev is the ref of the rank's previous binding, 0 before its
// first; Δ = ref - prev is neither 0 nor 1 (those have their lead bytes). A
// node can hold several engine hashes of one rank: the same ref again.
// Copies: m 1-15 is one copy on each tier whose bit is set (tier t is bit
// t; the common case); m 0 is followed by a tier mask byte (1-15) and one
// count byte (1-63) per tier in the mask, lowest tier first, at least one
// over 1. A binding holds at least one copy.
//
// Cost: a chain node is 9 bytes; a binding of the rank's next node with one
// copy on one tier 9 bytes, 1-5 more for a ref elsewhere. Memory: reader
// and writer keep 8 bytes per node (its shard and depth) and one frame.

const (
	snapshotMagic   = "\x89KVRSNP\n"
	snapshotVersion = 2

	frameHead    = 'H'
	frameData    = 'D'
	frameTrailer = 'T'

	// Lead bytes; a binding's low nibble is its ref form, the high its copies.
	recBindNext  = 0x00
	recBindSame  = 0x01
	recBindDelta = 0x02
	recNodeChain = 0x03
	recNodeBack  = 0x04
	recNodeStart = 0x05
	recRankBegin = 0x06
	recRankEnd   = 0x07

	// maxCopies is the largest copy count of a tier a binding holds.
	maxCopies = 63

	// frameTarget: a writer closes a data frame once it passes this.
	frameTarget = 64 << 10
)

// Version 2 stores tiers in a 4-bit mask: a change of kv.NumTiers needs a
// new format version (this fails to compile if it is not 4).
const _ = uint8(4-kv.NumTiers) + uint8(kv.NumTiers-4)

// NoRef is a node's parent when the node starts a path segment.
const NoRef = ^uint32(0)

// Geometry is the index's, written once in a snapshot: an import into an
// index of another geometry is refused (by the importer; this package only
// keeps and reports it).
type Geometry struct {
	Shards        uint32 // a node's shard is below it
	SegmentBlocks uint32
}

// Stream is a rank's position in its engine's event stream.
type Stream struct {
	HasSeq bool   // whether Seq is set (no event applied yet: false)
	Seq    uint64 // the last applied event's seq
	Sum    uint64 // the digest (XXH64) of the batch at Seq: tells incarnations apart
	Epoch  string // what identifies the engine's stream (the topic epoch)
}

// Counts are a snapshot's totals.
type Counts struct {
	Ranks    uint64
	Nodes    uint64
	Bindings uint64 // residencies: an engine hash of a rank on a node
}

// OneCopy returns the copies of a binding held once on tier t.
func OneCopy(t kv.Tier) [kv.NumTiers]uint8 {
	var c [kv.NumTiers]uint8
	c[t] = 1
	return c
}

// Visitor receives a snapshot's records as ReadSnapshot decodes them:
// Geometry first, then for each rank BeginRank, its Nodes, its Bindings
// and EndRank. What it receives obeys the format (a node's parent is an
// earlier ref or NoRef, shard and depth are given for every node, a
// binding's ref was a node's, its copies are not all zero), but the file
// is verified only at its end: build into something fresh and keep it
// only if ReadSnapshot returns nil. An error from a method stops the read.
type Visitor interface {
	Geometry(g Geometry) error
	BeginRank(key kv.WorkerRank, s Stream) error
	Node(ref, parent, shard uint32, key uint64, depth uint32) error
	Binding(engineHash uint64, ref uint32, copies [kv.NumTiers]uint8) error
	EndRank() error
}

// nodeInfo is what writer and reader keep of a node, by ref, to derive a
// child's shard and depth.
type nodeInfo struct {
	shard, depth uint32
}

// copiesCode returns a binding's copies code (the lead byte's high nibble:
// a tier mask, or 0 for explicit counts) and its tier mask; mask 0 means
// no copy, bad reports a count over maxCopies.
func copiesCode(c [kv.NumTiers]uint8) (code, mask byte, bad bool) {
	single := true
	for t, n := range c {
		if n > 0 {
			mask |= 1 << t
			single = single && n == 1
			bad = bad || n > maxCopies
		}
	}
	if single {
		code = mask
	}
	return code, mask, bad
}
