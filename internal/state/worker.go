package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
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

	// CapacityTokens and the per-rank endpoint lists are the record's
	// optional tail: a worker without them encodes as before they existed.
	CapacityTokens        uint64
	RankKVEventsEndpoints []string
	RankReplayEndpoints   []string
	RankEndpoints         []string
}

// maxRankList bounds a per-rank endpoint list: one entry a rank.
const maxRankList = 1 << 12

// Equal reports whether w and o are the same registration.
func (w *Worker) Equal(o *Worker) bool {
	return w.WorkerID == o.WorkerID && w.Model == o.Model && w.Endpoint == o.Endpoint &&
		w.KVEventsEndpoint == o.KVEventsEndpoint && w.ReplayEndpoint == o.ReplayEndpoint &&
		w.Topic == o.Topic && w.DPSize == o.DPSize && w.BlockSize == o.BlockSize && w.Source == o.Source &&
		w.CapacityTokens == o.CapacityTokens && slices.Equal(w.RankKVEventsEndpoints, o.RankKVEventsEndpoints) &&
		slices.Equal(w.RankReplayEndpoints, o.RankReplayEndpoints) && slices.Equal(w.RankEndpoints, o.RankEndpoints)
}

func (w *Worker) lists() [3]*[]string {
	return [3]*[]string{&w.RankKVEventsEndpoints, &w.RankReplayEndpoints, &w.RankEndpoints}
}

func (w *Worker) hasTail() bool {
	return w.CapacityTokens != 0 || len(w.RankKVEventsEndpoints)+len(w.RankReplayEndpoints)+len(w.RankEndpoints) > 0
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
	for _, l := range w.lists() {
		if len(*l) > maxRankList {
			return fmt.Errorf("a rank list of %d entries (limit %d)", len(*l), maxRankList)
		}
		for _, e := range *l {
			if len(e) > maxField {
				return fmt.Errorf("a rank endpoint of %d bytes (limit %d)", len(e), maxField)
			}
		}
	}
	return nil
}

func (w *Worker) strings() [7]*string {
	src := (*string)(&w.Source)
	return [7]*string{&w.WorkerID, &w.Model, &w.Endpoint, &w.KVEventsEndpoint, &w.ReplayEndpoint, &w.Topic, src}
}

// appendWorker encodes w: each string as uvarint length and bytes, in the
// order of strings(), then DPSize and BlockSize as uvarints; then, only
// when w has any, the tail: CapacityTokens as a uvarint and each list of
// lists() as a uvarint count and its strings.
func appendWorker(b []byte, w *Worker) []byte {
	for _, f := range w.strings() {
		b = appendString(b, *f)
	}
	b = binary.AppendUvarint(b, uint64(w.DPSize))
	b = binary.AppendUvarint(b, uint64(w.BlockSize))
	if !w.hasTail() {
		return b
	}
	b = binary.AppendUvarint(b, w.CapacityTokens)
	for _, l := range w.lists() {
		b = binary.AppendUvarint(b, uint64(len(*l)))
		for _, e := range *l {
			b = appendString(b, e)
		}
	}
	return b
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
		d.tail(&w)
	}
	if d.err == nil && d.pos != len(p) {
		d.err = fmt.Errorf("%d bytes after the record", len(p)-d.pos)
	}
	if d.err == nil && w.WorkerID == "" {
		d.err = errors.New("empty worker id")
	}
	return w, d.err
}

// tail decodes appendWorker's optional tail into w. A list's count is
// checked against the bytes left before anything is allocated for it.
func (d *decoder) tail(w *Worker) {
	w.CapacityTokens = d.uvarint()
	for _, l := range w.lists() {
		n := d.uvarint()
		if d.err != nil {
			return
		}
		if n > maxRankList || n > uint64(len(d.p)-d.pos) {
			d.fail("rank list of %d entries (limit %d, %d bytes left)", n, maxRankList, len(d.p)-d.pos)
			return
		}
		if n == 0 {
			continue
		}
		*l = make([]string, n)
		for i := range *l {
			(*l)[i] = d.string(maxField)
		}
	}
	if d.err == nil && !w.hasTail() {
		d.fail("empty record tail")
	}
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
