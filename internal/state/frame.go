package state

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
)

// Both formats are a file header followed by frames.
//
// File header (16 bytes):
//
//	magic   [8]byte  per format
//	version uint32   little endian
//	crc     uint32   CRC32C of the 12 bytes above
//
// A header whose CRC matches but whose version is newer than the reader's is
// refused with ErrFutureVersion (a bad CRC is ErrCorrupt, never a version).
//
// Frame (9 bytes + payload):
//
//	type    byte
//	length  uint32   payload length, little endian, at most maxFrame
//	crc     uint32   CRC32C of type, length and payload
//	payload [length]byte
//
// A CRC32 detects every error burst up to 32 bits long, so every flipped
// byte of a frame is caught before its payload is decoded.

const (
	fileHeaderLen  = 16
	frameHeaderLen = 9
	// maxFrame bounds a frame's payload: a reader allocates at most this.
	maxFrame = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// appendFileHeader appends a file header.
func appendFileHeader(b []byte, magic string, version uint32) []byte {
	start := len(b)
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint32(b, version)
	return binary.LittleEndian.AppendUint32(b, crc(b[start:]))
}

// sealFrame fills in the header of the frame in b: b[:frameHeaderLen] is
// reserved, the rest is the payload.
func sealFrame(b []byte, typ byte) {
	b[0] = typ
	binary.LittleEndian.PutUint32(b[1:5], uint32(len(b)-frameHeaderLen))
	c := crc32.Update(0, castagnoli, b[:5])
	c = crc32.Update(c, castagnoli, b[frameHeaderLen:])
	binary.LittleEndian.PutUint32(b[5:9], c)
}

// appendFrame appends a frame of typ around payload.
func appendFrame(b []byte, typ byte, payload []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, frameHeaderLen)...)
	b = append(b, payload...)
	sealFrame(b[start:], typ)
	return b
}

// frameReader reads a header and then frames, verifying each frame's CRC
// before returning its payload, and keeps the offset and a running CRC32C
// of every byte read.
type frameReader struct {
	r   io.Reader
	off int64  // bytes consumed
	sum uint32 // CRC32C of bytes consumed
	// sumBefore is sum before the last frame read: the trailer's checksum.
	sumBefore uint32
	hdr       [frameHeaderLen]byte
	buf       []byte
}

// readFull reads len(p) bytes. A clean end before the first byte is io.EOF;
// an end after it is ErrTruncated; other errors are returned as they are.
func (fr *frameReader) readFull(p []byte, what string) error {
	n, err := io.ReadFull(fr.r, p)
	fr.sum = crc32.Update(fr.sum, castagnoli, p[:n])
	fr.off += int64(n)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF) && n == 0:
		return io.EOF
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return formatErr(ErrTruncated, fr.off, "file ends inside %s", what)
	}
	return err
}

// header reads and checks the file header; it returns the version.
func (fr *frameReader) header(magic string, maxVersion uint32) (uint32, error) {
	var h [fileHeaderLen]byte
	if err := fr.readFull(h[:], "the file header"); err != nil {
		if err == io.EOF {
			return 0, formatErr(ErrTruncated, 0, "empty file")
		}
		return 0, err
	}
	if string(h[:8]) != magic {
		return 0, formatErr(ErrCorrupt, 0, "bad magic %q, want %q", h[:8], magic)
	}
	if got, want := binary.LittleEndian.Uint32(h[12:]), crc(h[:12]); got != want {
		return 0, formatErr(ErrCorrupt, 12, "header checksum %#08x, computed %#08x", got, want)
	}
	v := binary.LittleEndian.Uint32(h[8:12])
	if v == 0 {
		return 0, formatErr(ErrCorrupt, 8, "format version 0")
	}
	if v > maxVersion {
		return 0, formatErr(ErrFutureVersion, 8, "format version %d, this build reads up to %d", v, maxVersion)
	}
	return v, nil
}

// next reads the next frame. It returns io.EOF at a clean end (between
// frames); the payload is valid until the next call.
func (fr *frameReader) next() (typ byte, payload []byte, err error) {
	start := fr.off
	fr.sumBefore = fr.sum
	if err := fr.readFull(fr.hdr[:], "a frame header"); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(fr.hdr[1:5])
	if n > maxFrame {
		return 0, nil, formatErr(ErrCorrupt, start, "frame length %d over the limit %d", n, maxFrame)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	p := fr.buf[:n]
	if err := fr.readFull(p, "a frame"); err != nil {
		if err == io.EOF {
			err = formatErr(ErrTruncated, fr.off, "file ends inside a frame")
		}
		return 0, nil, err
	}
	c := crc32.Update(0, castagnoli, fr.hdr[:5])
	c = crc32.Update(c, castagnoli, p)
	if got := binary.LittleEndian.Uint32(fr.hdr[5:9]); got != c {
		return 0, nil, formatErr(ErrCorrupt, start, "frame checksum %#08x, computed %#08x", got, c)
	}
	return fr.hdr[0], p, nil
}

// atEOF checks that nothing follows.
func (fr *frameReader) atEOF() error {
	var b [1]byte
	n, err := io.ReadFull(fr.r, b[:])
	if n > 0 {
		return formatErr(ErrCorrupt, fr.off, "data after the end")
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
