package state

import (
	"github.com/kvrouter/kvrouter/internal/kv"
)

// Snapshot file format, version 1.
//
// A snapshot is the file header (magic "\x89KVRSNP\n", version 1; see
// frame.go) and then frames:
//
//	'H'  first and once: byte number of tiers (kv.NumTiers), uvarint the
//	     dictionary's size limit (maxDict)
//	'D'  data: records, each wholly inside one frame (the writer closes a
//	     frame once it passes 64 KiB)
//	'T'  last and once: uvarint ranks, uvarint blocks, uvarint residencies,
//	     uint32 CRC32C of every byte of the file before this frame
//
// and nothing after the trailer. Every frame has its own CRC32C (checked
// before its records are decoded) and the trailer's checksum covers the
// whole file, so a cut at any point, a dropped or repeated frame and any
// flipped byte are refused.
//
// Records (strings are a uvarint length and bytes):
//
//	rank begin  0x01, string worker id, uvarint dp rank, byte flags (bit 0:
//	            has seq), uvarint last applied seq (if has seq), string topic epoch
//	block       a lead byte and fields, below
//	rank end    0x03, uvarint blocks of the rank
//
// A rank is a rank begin, its blocks and a rank end; a rank key appears once.
// A rank's blocks form a forest: each names as parent an earlier block of
// the same rank, or none. Parent before child means a parent is a back-
// reference, and in depth-first order it is the previous block (no bytes).
//
// Block lead byte: bits 0-1 the parent, bits 2-3 the router block hash,
// bits 4-7 the tiers. Then, in order: the parent's distance, the hash, the
// explicit tiers, the engine hash.
//
//	parent  0: the previous block. 1: none (a root). 2: a uvarint d follows,
//	        and the parent is block i-2-d (block i being this one). 3: not a
//	        block; 0x03 ends the rank, other values are invalid.
//	hash    0: predicted (below). 1: a uvarint k follows, the hash is
//	        dictionary entry n-k (n entries). 2: a literal, 8 bytes little
//	        endian. 3: invalid.
//	tiers   1-15: one copy on each tier whose bit is set (the common case:
//	        one copy on one tier, no extra byte). 0: a tier mask byte
//	        follows, then one count byte (1-255) per tier in the mask. Mask
//	        0 is a placeholder: a path block the rank holds no copy of, kept
//	        so its descendants' prefixes are whole (the index keeps a child
//	        whose parent was removed); it has no engine hash (reads as 0).
//	engine  8 bytes little endian: engine hashes are opaque.
//
// Router block hashes repeat across ranks (shared prompt prefixes), and a
// child's hash is not derived from its parent, so they go through a
// dictionary that writer and reader build alike: each literal becomes the
// next entry (numbered from 1) while there are fewer than maxDict. A block's
// context is its parent's entry (0 for a root; none if the parent's hash has
// no entry), and each context predicts the entry of the last block seen
// under it. So a block on a path another rank already wrote costs the lead
// byte and its engine hash: 9 bytes. A hash never seen costs 8 bytes more, one
// seen elsewhere a short back-reference.
//
// Memory: the reader keeps 12 bytes per dictionary entry, the writer 12
// and a hash table of 16-32 (see Writer.find), both 4 bytes per block of
// the current rank and one frame. maxDict (default 1<<21) bounds the
// dictionary, so 24 MB (reader) and 56 MB (writer) for any number of
// residencies; past it, new hashes are literals. On the benchmark fleet
// (bench_test.go, 1000 ranks x 16,384 blocks, over 4 M distinct hashes) the
// limit costs 0.2 bytes per residency against 1<<22 and saves half the
// memory, and 0.4 more at 1<<20.

const (
	snapshotMagic   = "\x89KVRSNP\n"
	snapshotVersion = 1

	frameHead    = 'H'
	frameData    = 'D'
	frameTrailer = 'T'

	recRankBegin = 0x01
	recRankEnd   = 0x03

	parentPrev     = 0
	parentRoot     = 1
	parentExplicit = 2
	parentControl  = 3

	hashPredicted = 0 << 2
	hashRef       = 1 << 2
	hashLiteral   = 2 << 2

	// frameTarget: a writer closes a data frame once it passes this.
	frameTarget = 64 << 10
	// defaultMaxDict bounds the dictionary a writer builds; maxMaxDict is
	// the largest a reader accepts.
	defaultMaxDict = 1 << 21
	maxMaxDict     = 1 << 24

	// noEntry: a block whose hash has no dictionary entry.
	noEntry = ^uint32(0)
)

// Version 1 stores tiers in a 4-bit mask: a change of kv.NumTiers needs a
// new format version (this fails to compile if it is not 4).
const _ = uint8(4-kv.NumTiers) + uint8(kv.NumTiers-4)

// NoParent is Block.Parent for a root block.
const NoParent = -1

// Block is one stored block of a rank.
type Block struct {
	// EngineHash is opaque, meaningful on its worker only. A placeholder's
	// is not stored and reads back as 0.
	EngineHash uint64
	BlockHash  uint64 // the router block hash
	// Parent is the index (in the rank, from 0) of the parent block, an
	// earlier block of the same rank, or NoParent.
	Parent int32
	// Copies per tier. All zero: a placeholder (see the format).
	Copies [kv.NumTiers]uint8
}

// Placeholder reports whether the rank holds no copy of b.
func (b *Block) Placeholder() bool { return b.Copies == [kv.NumTiers]uint8{} }

// OneCopy returns the copies of a block held once on tier t.
func OneCopy(t kv.Tier) [kv.NumTiers]uint8 {
	var c [kv.NumTiers]uint8
	c[t] = 1
	return c
}

// Stream is a rank's position in its engine's event stream.
type Stream struct {
	HasSeq bool   // whether Seq is set (no event applied yet: false)
	Seq    uint64 // the last applied event's seq
	Epoch  string // what identifies the engine's stream (the topic epoch)
}

// Counts are a snapshot's totals.
type Counts struct {
	Ranks       uint64
	Blocks      uint64 // placeholders included
	Residencies uint64 // blocks with at least one copy
}

// dict is the router block hash dictionary (see the format). Entry e is
// hashes[e]; next[c] is context c's predicted entry (0: none).
type dict struct {
	hashes []uint64
	next   []uint32
	max    int
}

func newDict(max int) dict { return dict{hashes: []uint64{0}, next: []uint32{0}, max: max} }

// entries is the number of entries.
func (d *dict) entries() int { return len(d.hashes) - 1 }

// add enters h if there is room and returns its entry, or noEntry.
func (d *dict) add(h uint64) uint32 {
	if d.entries() >= d.max {
		return noEntry
	}
	if len(d.hashes) == cap(d.hashes) { // double: append grows big slices by 1.25
		n := min(2*cap(d.hashes), d.max+1)
		d.hashes = append(make([]uint64, 0, n), d.hashes...)
		d.next = append(make([]uint32, 0, n), d.next...)
	}
	d.hashes = append(d.hashes, h)
	d.next = append(d.next, 0)
	return uint32(len(d.hashes) - 1)
}

// fmix64 is MurmurHash3's 64-bit finalizer.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}
