package state

import (
	"encoding/binary"
	"io"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Reader streams a snapshot: NextRank and Rank for each rank, NextBlock and
// Block for its blocks. It decodes only frames whose checksum matched, but
// the file as a whole is verified only at its end: load into a fresh index
// and commit it only when NextRank has returned false with Err() == nil.
// Any corruption, truncation or future version makes Err non-nil, and the
// Reader never reports success on a bad file. Not safe for concurrent use.
//
//	r, err := NewReader(f)
//	for r.NextRank() {
//		key, stream := r.Rank()
//		for r.NextBlock() {
//			b := r.Block()
//		}
//	}
//	if err := r.Err(); err != nil { discard }
type Reader struct {
	fr  frameReader
	err error

	p       []byte // the current data frame's payload
	pos     int
	payload int64 // offset of p in the file

	state   int
	key     kv.WorkerRank
	stream  Stream
	block   Block
	entries []uint32
	dict    dict
	keys    map[kv.WorkerRank]struct{}
	counts  Counts
}

const (
	stBetween = iota // between ranks
	stRank           // in a rank
	stDone           // trailer verified, or failed
)

// NewReader reads and checks the header. A bad header is refused at once.
func NewReader(r io.Reader) (*Reader, error) {
	sr := &Reader{fr: frameReader{r: r}, keys: map[kv.WorkerRank]struct{}{}}
	if _, err := sr.fr.header(snapshotMagic, snapshotVersion); err != nil {
		return nil, err
	}
	typ, p, err := sr.fr.next()
	if err == io.EOF {
		err = formatErr(ErrTruncated, sr.fr.off, "no head frame")
	}
	if err != nil {
		return nil, err
	}
	if typ != frameHead {
		return nil, formatErr(ErrCorrupt, fileHeaderLen, "first frame of type %#02x, want head", typ)
	}
	d := decoder{p: p}
	tiers := d.byte()
	maxDict := d.uvarint()
	switch {
	case d.err != nil || d.pos != len(p):
		return nil, formatErr(ErrCorrupt, fileHeaderLen, "bad head frame")
	case tiers != byte(kv.NumTiers):
		return nil, formatErr(ErrCorrupt, fileHeaderLen, "%d tiers, this build has %d", tiers, kv.NumTiers)
	case maxDict > maxMaxDict:
		return nil, formatErr(ErrCorrupt, fileHeaderLen, "dictionary limit %d over %d", maxDict, maxMaxDict)
	}
	sr.dict = newDict(int(maxDict))
	return sr, nil
}

// Err is the first error met, nil until the end; after NextRank returned
// false, nil means the whole file was read and verified.
func (r *Reader) Err() error { return r.err }

// Counts returns the counts read so far (the file's, once verified).
func (r *Reader) Counts() Counts { return r.counts }

// Rank returns the current rank's key and stream position.
func (r *Reader) Rank() (kv.WorkerRank, Stream) { return r.key, r.stream }

// Block returns the current block. Its index in the rank is the number of
// blocks before it.
func (r *Reader) Block() Block { return r.block }

// fail records a format error at the current position and stops the reader.
func (r *Reader) fail(kind error, format string, args ...any) bool {
	if r.err == nil {
		r.err = formatErr(kind, r.payload+int64(r.pos), format, args...)
	}
	r.state = stDone
	return false
}

// frame reads the next frame into p; it returns the frame type, or 0 when it failed.
func (r *Reader) frame() byte {
	typ, p, err := r.fr.next()
	if err == io.EOF {
		r.fail(ErrTruncated, "file ends without a trailer")
		return 0
	}
	if err != nil {
		r.err, r.state = err, stDone
		return 0
	}
	r.p, r.pos, r.payload = p, 0, r.fr.off-int64(len(p))
	if typ == frameData && len(p) == 0 {
		r.fail(ErrCorrupt, "empty data frame")
		return 0
	}
	return typ
}

// NextRank moves to the next rank, skipping what is left of the current
// one. It returns false at the end of the file (verified: Err is nil) or
// on an error.
func (r *Reader) NextRank() bool {
	for r.state == stRank {
		r.NextBlock()
	}
	if r.state != stBetween {
		return false
	}
	if r.pos == len(r.p) {
		switch typ := r.frame(); typ {
		case 0:
			return false
		case frameTrailer:
			return r.trailer()
		case frameData:
		default:
			return r.fail(ErrCorrupt, "frame of type %#02x", typ)
		}
	}
	if r.p[r.pos] != recRankBegin {
		return r.fail(ErrCorrupt, "record %#02x where a rank begins", r.p[r.pos])
	}
	d := decoder{p: r.p, pos: r.pos + 1}
	var key kv.WorkerRank
	var s Stream
	key.ID = d.string(maxField)
	key.DPRank = d.uint32()
	switch flags := d.byte(); flags {
	case 0:
	case 1:
		s.HasSeq, s.Seq = true, d.uvarint()
	default:
		d.fail("stream flags %#02x", flags)
	}
	s.Epoch = d.string(maxField)
	if d.err == nil && key.ID == "" {
		d.fail("empty worker id")
	}
	if d.err != nil {
		return r.fail(ErrCorrupt, "rank record: %v", d.err)
	}
	if _, dup := r.keys[key]; dup {
		return r.fail(ErrCorrupt, "rank %s twice", key)
	}
	r.keys[key] = struct{}{}
	r.pos = d.pos
	r.key, r.stream, r.entries, r.state = key, s, r.entries[:0], stRank
	r.counts.Ranks++
	return true
}

// trailer checks the trailer frame in p and the end of the file.
func (r *Reader) trailer() bool {
	d := decoder{p: r.p}
	c := Counts{Ranks: d.uvarint(), Blocks: d.uvarint(), Residencies: d.uvarint()}
	if d.err != nil || len(r.p)-d.pos != 4 {
		return r.fail(ErrCorrupt, "bad trailer")
	}
	got := binary.LittleEndian.Uint32(r.p[d.pos:])
	if c != r.counts {
		return r.fail(ErrCorrupt, "trailer counts %+v, read %+v", c, r.counts)
	}
	if want := r.fr.sumBefore; got != want {
		return r.fail(ErrCorrupt, "file checksum %#08x, computed %#08x", got, want)
	}
	if err := r.fr.atEOF(); err != nil {
		r.err = err
	}
	r.state = stDone
	return false
}

// NextBlock moves to the current rank's next block. It returns false at
// the rank's end or on an error.
func (r *Reader) NextBlock() bool {
	if r.state != stRank {
		return false
	}
	if r.pos == len(r.p) {
		switch typ := r.frame(); typ {
		case 0:
			return false
		case frameData:
		default:
			return r.fail(ErrCorrupt, "frame of type %#02x inside rank %s", typ, r.key)
		}
	}
	p, pos := r.p, r.pos
	lead := p[pos]
	pos++
	i := len(r.entries)
	parent, ctx := int32(NoParent), uint32(0)
	switch lead & 3 {
	case parentPrev:
		if i == 0 {
			return r.fail(ErrCorrupt, "rank %s: first block's parent is the previous block", r.key)
		}
		parent = int32(i - 1)
	case parentRoot:
	case parentExplicit:
		d, n := binary.Uvarint(p[pos:])
		if n <= 0 || i < 2 || d > uint64(i-2) {
			return r.fail(ErrCorrupt, "rank %s block %d: bad parent distance", r.key, i)
		}
		pos += n
		parent = int32(i - 2 - int(d))
	default:
		if lead != recRankEnd {
			return r.fail(ErrCorrupt, "rank %s: record %#02x", r.key, lead)
		}
		n, m := binary.Uvarint(p[pos:])
		if m <= 0 || n != uint64(i) {
			return r.fail(ErrCorrupt, "rank %s ends after %d blocks, its end says %d", r.key, i, n)
		}
		r.pos = pos + m
		r.state = stBetween
		return false
	}
	if parent != NoParent {
		ctx = r.entries[parent]
	}
	var b Block
	b.Parent = parent
	entry := noEntry
	switch lead & 0xc {
	case hashPredicted:
		if ctx == noEntry || r.dict.next[ctx] == 0 {
			return r.fail(ErrCorrupt, "rank %s block %d: no prediction for its hash", r.key, i)
		}
		entry = r.dict.next[ctx]
	case hashRef:
		k, n := binary.Uvarint(p[pos:])
		if n <= 0 || k >= uint64(r.dict.entries()) {
			return r.fail(ErrCorrupt, "rank %s block %d: bad dictionary reference", r.key, i)
		}
		pos += n
		entry = uint32(uint64(r.dict.entries()) - k)
	case hashLiteral:
		if len(p)-pos < 8 {
			return r.fail(ErrCorrupt, "rank %s block %d: record crosses the frame end", r.key, i)
		}
		b.BlockHash = binary.LittleEndian.Uint64(p[pos:])
		pos += 8
		entry = r.dict.add(b.BlockHash)
	default:
		return r.fail(ErrCorrupt, "rank %s block %d: hash mode 3", r.key, i)
	}
	if entry != noEntry {
		b.BlockHash = r.dict.hashes[entry]
		if ctx != noEntry {
			r.dict.next[ctx] = entry
		}
	}
	held := true
	if mask := lead >> 4; mask != 0 {
		for t := range b.Copies {
			b.Copies[t] = (mask >> t) & 1
		}
	} else {
		if pos >= len(p) {
			return r.fail(ErrCorrupt, "rank %s block %d: record crosses the frame end", r.key, i)
		}
		mask := p[pos]
		pos++
		if mask>>kv.NumTiers != 0 {
			return r.fail(ErrCorrupt, "rank %s block %d: tier mask %#02x", r.key, i, mask)
		}
		for t := range b.Copies {
			if mask&(1<<t) != 0 {
				if pos >= len(p) || p[pos] == 0 {
					return r.fail(ErrCorrupt, "rank %s block %d: bad copy count", r.key, i)
				}
				b.Copies[t] = p[pos]
				pos++
			}
		}
		held = mask != 0
	}
	if held {
		if len(p)-pos < 8 {
			return r.fail(ErrCorrupt, "rank %s block %d: record crosses the frame end", r.key, i)
		}
		b.EngineHash = binary.LittleEndian.Uint64(p[pos:])
		pos += 8
		r.counts.Residencies++
	}
	r.pos = pos
	r.block = b
	r.entries = append(r.entries, entry)
	r.counts.Blocks++
	return true
}
