package state

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Source says where a registered worker came from.
type Source string

// Sources.
const (
	SourceConfig    Source = "config"    // the YAML file
	SourceAPI       Source = "api"       // Registry/RegisterWorker
	SourceDiscovery Source = "discovery" // discovered (Kubernetes, DNS)
)

// Worker is one registered worker as the registry stores it.
type Worker struct {
	WorkerID         string
	Model            string
	Endpoint         string
	KVEventsEndpoint string
	ReplayEndpoint   string
	Topic            string
	DPSize           uint32
	BlockSize        uint32
	Source           Source
}

// maxField bounds a stored string: a worker's fields are ids and URLs.
const maxField = 4096

// validate checks what Put accepts.
func (w *Worker) validate() error {
	if w.WorkerID == "" {
		return errors.New("empty worker id")
	}
	if w.Source != SourceConfig && w.Source != SourceAPI && w.Source != SourceDiscovery {
		return fmt.Errorf("source %q is none of %q, %q, %q", w.Source, SourceConfig, SourceAPI, SourceDiscovery)
	}
	for _, f := range w.strings() {
		if len(*f) > maxField {
			return fmt.Errorf("a field of %d bytes (limit %d)", len(*f), maxField)
		}
	}
	return nil
}

func (w *Worker) strings() [7]*string {
	src := (*string)(&w.Source)
	return [7]*string{&w.WorkerID, &w.Model, &w.Endpoint, &w.KVEventsEndpoint, &w.ReplayEndpoint, &w.Topic, src}
}

// appendWorker encodes w: each string as uvarint length and bytes, in the
// order of strings(), then DPSize and BlockSize as uvarints.
func appendWorker(b []byte, w *Worker) []byte {
	for _, f := range w.strings() {
		b = appendString(b, *f)
	}
	b = binary.AppendUvarint(b, uint64(w.DPSize))
	return binary.AppendUvarint(b, uint64(w.BlockSize))
}

// decodeWorker decodes a whole payload written by appendWorker.
func decodeWorker(p []byte) (Worker, error) {
	var w Worker
	d := decoder{p: p}
	for _, f := range w.strings() {
		*f = d.string(maxField)
	}
	w.DPSize = d.uint32()
	w.BlockSize = d.uint32()
	if d.err == nil && d.pos != len(p) {
		d.err = fmt.Errorf("%d bytes after the record", len(p)-d.pos)
	}
	if d.err == nil && w.WorkerID == "" {
		d.err = errors.New("empty worker id")
	}
	return w, d.err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads varints and strings from a verified payload; the first
// problem sticks in err and later reads return zero values.
type decoder struct {
	p   []byte
	pos int
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p[d.pos:])
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.pos += n
	return v
}

func (d *decoder) uint32() uint32 {
	v := d.uvarint()
	if v > 1<<32-1 {
		d.fail("value %d over 32 bits", v)
		return 0
	}
	return uint32(v)
}

func (d *decoder) uint64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.p)-d.pos < 8 {
		d.fail("record cut short")
		return 0
	}
	d.pos += 8
	return binary.LittleEndian.Uint64(d.p[d.pos-8:])
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.pos >= len(d.p) {
		d.fail("record cut short")
		return 0
	}
	d.pos++
	return d.p[d.pos-1]
}

func (d *decoder) string(limit int) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(limit) || n > uint64(len(d.p)-d.pos) {
		d.fail("string of %d bytes (limit %d, %d left)", n, limit, len(d.p)-d.pos)
		return ""
	}
	s := string(d.p[d.pos : d.pos+int(n)])
	d.pos += int(n)
	return s
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}
