package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Writer streams a snapshot to an io.Writer (see the format in
// snapshot_format.go): BeginRank, its blocks, EndRank, for each rank, then
// Close. It buffers one frame (64 KiB) and the dictionary, never the file.
// The first error sticks: every later call returns it. Not safe for
// concurrent use.
type Writer struct {
	w   io.Writer
	err error
	buf []byte // the open frame; buf[:frameHeaderLen] is its header
	sum uint32 // CRC32C of the bytes written

	dict  dict
	table []uint64 // entries by hash (see find)

	inRank  bool
	key     kv.WorkerRank
	entries []uint32 // the open rank's blocks' entries
	keys    map[kv.WorkerRank]struct{}
	counts  Counts
	closed  bool
}

// NewWriter starts a snapshot on w: it writes the header at once.
func NewWriter(w io.Writer) *Writer { return newWriter(w, defaultMaxDict) }

// newWriter is NewWriter with a dictionary limit (tests: a full dictionary).
func newWriter(w io.Writer, maxDict int) *Writer {
	sw := &Writer{
		w:     w,
		buf:   make([]byte, frameHeaderLen, frameTarget+4*maxField),
		dict:  newDict(maxDict),
		table: make([]uint64, 1<<12),
		keys:  map[kv.WorkerRank]struct{}{},
	}
	head := appendFileHeader(nil, snapshotMagic, snapshotVersion)
	p := binary.AppendUvarint([]byte{byte(kv.NumTiers)}, uint64(sw.dict.max))
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
func (w *Writer) endRecord() {
	if len(w.buf)-frameHeaderLen >= frameTarget {
		w.flush()
	}
}

// BeginRank starts the blocks of rank key, whose stream position is s.
// Each key appears once in a snapshot.
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
	} else {
		b = append(b, 0)
	}
	w.buf = appendString(b, s.Epoch)
	w.inRank, w.key, w.entries = true, key, w.entries[:0]
	w.counts.Ranks++
	w.endRecord()
	return w.err
}

// Block adds the open rank's next block. Its Parent must be NoParent or
// the index of an earlier block of the rank (the first block is 0). Write
// a rank depth first: a parent that is the previous block costs no byte.
func (w *Writer) Block(b Block) error {
	if w.err != nil {
		return w.err
	}
	if !w.inRank {
		return w.fail(errors.New("block outside a rank"))
	}
	i := len(w.entries)
	lead := byte(parentRoot)
	ctx := uint32(0)
	if b.Parent != NoParent {
		if b.Parent < 0 || int(b.Parent) >= i {
			return w.fail(fmt.Errorf("rank %s block %d: parent %d is not an earlier block", w.key, i, b.Parent))
		}
		lead = parentExplicit
		if int(b.Parent) == i-1 {
			lead = parentPrev
		}
		ctx = w.entries[b.Parent]
	}
	// The hash: predicted, a dictionary reference, or a literal.
	entry := noEntry
	var ref uint32
	if ctx != noEntry {
		if p := w.dict.next[ctx]; p != 0 && w.dict.hashes[p] == b.BlockHash {
			entry = p
		}
	}
	if entry == noEntry {
		if e := w.find(b.BlockHash); e != 0 {
			lead |= hashRef
			entry, ref = e, uint32(w.dict.entries())-e
		} else {
			lead |= hashLiteral
			entry = w.enter(b.BlockHash)
		}
	}
	if ctx != noEntry && entry != noEntry {
		w.dict.next[ctx] = entry
	}
	// The tiers: one copy on each tier of a mask fits in the lead byte.
	var mask byte
	single := true
	for t, c := range b.Copies {
		if c > 0 {
			mask |= 1 << t
			single = single && c == 1
		}
	}
	if mask != 0 && single {
		lead |= mask << 4
	}
	buf := append(w.buf, lead)
	if lead&3 == parentExplicit {
		buf = binary.AppendUvarint(buf, uint64(i-2-int(b.Parent)))
	}
	switch lead & 0xc {
	case hashRef:
		buf = binary.AppendUvarint(buf, uint64(ref))
	case hashLiteral:
		buf = binary.LittleEndian.AppendUint64(buf, b.BlockHash)
	}
	if lead>>4 == 0 {
		buf = append(buf, mask)
		for _, c := range b.Copies {
			if c > 0 {
				buf = append(buf, c)
			}
		}
	}
	if mask != 0 {
		buf = binary.LittleEndian.AppendUint64(buf, b.EngineHash)
		w.counts.Residencies++
	}
	w.buf = buf
	w.entries = append(w.entries, entry)
	w.counts.Blocks++
	w.endRecord()
	return w.err
}

// EndRank ends the open rank.
func (w *Writer) EndRank() error {
	if w.err != nil {
		return w.err
	}
	if !w.inRank {
		return w.fail(errors.New("end rank: no rank open"))
	}
	w.buf = binary.AppendUvarint(append(w.buf, recRankEnd), uint64(len(w.entries)))
	w.inRank = false
	w.endRecord()
	return w.err
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
	p = binary.AppendUvarint(p, w.counts.Blocks)
	p = binary.AppendUvarint(p, w.counts.Residencies)
	p = binary.LittleEndian.AppendUint32(p, w.sum)
	w.write(appendFrame(nil, frameTrailer, p))
	w.closed = true
	return w.err
}

// The writer finds a hash's entry in an open-addressing table of slots,
// each an entry number (low 32 bits, 0: empty) and the top 32 bits of the
// hash's mix (a fingerprint): a lookup of a hash not entered, the common
// miss, touches one slot and not the dictionary.

// find returns h's entry, or 0.
func (w *Writer) find(h uint64) uint32 {
	m := fmix64(h)
	mask := uint64(len(w.table) - 1)
	for i := m & mask; ; i = (i + 1) & mask {
		s := w.table[i]
		if s == 0 {
			return 0
		}
		if s>>32 == m>>32 && w.dict.hashes[uint32(s)] == h {
			return uint32(s)
		}
	}
}

// enter adds h (not in the dictionary) if there is room.
func (w *Writer) enter(h uint64) uint32 {
	e := w.dict.add(h)
	if e == noEntry {
		return e
	}
	if 2*w.dict.entries() > len(w.table) {
		w.table = make([]uint64, 2*len(w.table))
		for e := 1; e < len(w.dict.hashes); e++ {
			w.insert(uint32(e))
		}
	} else {
		w.insert(e)
	}
	return e
}

func (w *Writer) insert(e uint32) {
	m := fmix64(w.dict.hashes[e])
	mask := uint64(len(w.table) - 1)
	for i := m & mask; ; i = (i + 1) & mask {
		if w.table[i] == 0 {
			w.table[i] = m>>32<<32 | uint64(e)
			return
		}
	}
}
