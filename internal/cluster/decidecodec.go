package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/kvrouter/kvrouter/internal/scoring"
)

// A forwarded Route and its answer (decide.go):
//
//	magic 'K' 'D', version 1, kind (1 route, 2 decision, 3 refused)
//	route:    uvarint len + model, uvarint tokens, uvarint len + request id,
//	          8-byte little-endian temperature (IEEE 754 bits),
//	          uvarint max candidates, uvarint n + n 8-byte block hashes
//	decision: uvarint len + worker id, uvarint dp rank, uvarint len + endpoint,
//	          uvarint matched, uvarint prompt blocks, 8-byte cost,
//	          flags byte (1 diverted), uvarint diverted blocks,
//	          uvarint len + reason, 8-byte random matched,
//	          uvarint n + n candidates: uvarint len + worker id,
//	          uvarint dp rank, uvarint matched, 8-byte prefill blocks,
//	          8-byte decode blocks, 8-byte cost
//	refused:  class byte (0: decide here, 1: the request id is active on
//	          the decider), uvarint len + the decider's error
//
// Every count is checked against the bytes left, so a decoder allocates
// no more than the message's size; a message is read to its last byte.

const (
	decideMagic1 = 'D'

	kindRoute    = 1
	kindDecision = 2
	kindRefused  = 3

	decisionFlagDiverted = 1

	// minCandidateBytes is a candidate's smallest encoding: an empty id,
	// a one-byte rank and matched, and three floats.
	minCandidateBytes = 3 + 3*8
)

func appendDecideHeader(b []byte, kind byte) []byte {
	return append(b, magic0, decideMagic1, codecVersion, kind)
}

func appendFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

func (d *decoder) float(what string) float64 {
	return math.Float64frombits(d.uint64le(what))
}

// appendRoute appends fr as a route message.
func appendRoute(b []byte, fr *scoring.ForwardedRoute) []byte {
	b = appendDecideHeader(b, kindRoute)
	b = appendString(b, fr.Model)
	b = binary.AppendUvarint(b, uint64(max(fr.Tokens, 0)))
	b = appendString(b, fr.RequestID)
	b = appendFloat(b, fr.Temperature)
	b = binary.AppendUvarint(b, uint64(max(fr.MaxCandidates, 0)))
	b = binary.AppendUvarint(b, uint64(len(fr.Hashes)))
	for _, h := range fr.Hashes {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	return b
}

// appendDecision appends dec as a decision message.
func appendDecision(b []byte, dec *scoring.Decision) []byte {
	b = appendDecideHeader(b, kindDecision)
	b = appendString(b, dec.WorkerID)
	b = binary.AppendUvarint(b, uint64(dec.DPRank))
	b = appendString(b, dec.Endpoint)
	b = binary.AppendUvarint(b, uint64(dec.Matched))
	b = binary.AppendUvarint(b, uint64(dec.PromptBlocks))
	b = appendFloat(b, dec.Cost)
	var flags byte
	if dec.Diverted {
		flags |= decisionFlagDiverted
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(dec.DivertedBlocks))
	b = appendString(b, dec.Reason)
	b = appendFloat(b, dec.RandomMatched)
	b = binary.AppendUvarint(b, uint64(len(dec.Candidates)))
	for i := range dec.Candidates {
		c := &dec.Candidates[i]
		b = appendString(b, c.WorkerID)
		b = binary.AppendUvarint(b, uint64(c.DPRank))
		b = binary.AppendUvarint(b, uint64(c.Matched))
		b = appendFloat(b, c.PrefillBlocks)
		b = appendFloat(b, c.DecodeBlocks)
		b = appendFloat(b, c.Cost)
	}
	return b
}

// Classes of a refusal.
const (
	refusedDecideHere    = 0
	refusedAlreadyExists = 1
)

// Refusal is a decider's refusal of a forwarded Route.
type refusal struct {
	class byte
	msg   string
}

// appendRefused appends a refusal carrying the decider's error.
func appendRefused(b []byte, err error) []byte {
	msg := err.Error()
	if len(msg) > maxString {
		msg = msg[:maxString]
	}
	var class byte = refusedDecideHere
	if errors.Is(err, scoring.ErrAlreadyExists) {
		class = refusedAlreadyExists
	}
	return appendString(append(appendDecideHeader(b, kindRefused), class), msg)
}

// decideHeader reads a forwarded-Route message's header and returns its kind.
func decideHeader(b []byte) (*decoder, byte) {
	d := &decoder{b: b}
	if d.byte("magic") != magic0 || d.byte("magic") != decideMagic1 {
		d.fail("magic")
		return d, 0
	}
	if v := d.byte("version"); d.err == nil && v != codecVersion {
		d.err = fmt.Errorf("%w: version %d, want %d", ErrMalformed, v, codecVersion)
	}
	return d, d.byte("kind")
}

// decodeRoute reads a route message into fr, whose Hashes' backing array
// it reuses.
func decodeRoute(b []byte, fr *scoring.ForwardedRoute) error {
	d, kind := decideHeader(b)
	if d.err == nil && kind != kindRoute {
		d.fail(fmt.Sprintf("kind %d, want a route", kind))
	}
	*fr = scoring.ForwardedRoute{Hashes: fr.Hashes[:0]}
	fr.Model = d.string("model")
	fr.Tokens = int(d.int64("tokens"))
	fr.RequestID = d.string("request id")
	fr.Temperature = d.float("temperature")
	fr.MaxCandidates = int(d.int64("max candidates"))
	n := d.uvarint("hash count")
	if d.err == nil && n > uint64(len(b)-d.off)/8 {
		d.fail("hash count")
	}
	if d.err == nil {
		fr.Hashes = slices.Grow(fr.Hashes, int(n))
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		fr.Hashes = append(fr.Hashes, d.uint64le("block hash"))
	}
	return d.end()
}

// decodeDecision reads a decision message into dec, whose Candidates'
// memory it reuses, or returns the decider's refusal.
func decodeDecision(b []byte, dec *scoring.Decision) (*refusal, error) {
	d, kind := decideHeader(b)
	switch {
	case d.err != nil:
		return nil, d.err
	case kind == kindRefused:
		r := &refusal{class: d.byte("class")}
		if d.err == nil && r.class > refusedAlreadyExists {
			d.fail(fmt.Sprintf("refusal class %d", r.class))
		}
		r.msg = d.string("error")
		if err := d.end(); err != nil {
			return nil, err
		}
		return r, nil
	case kind != kindDecision:
		d.fail(fmt.Sprintf("kind %d, want a decision", kind))
		return nil, d.err
	}
	*dec = scoring.Decision{Candidates: dec.Candidates[:0]}
	dec.WorkerID = d.string("worker id")
	dec.DPRank = d.rank("dp rank")
	dec.Endpoint = d.string("endpoint")
	dec.Matched = d.uint32("matched")
	dec.PromptBlocks = d.uint32("prompt blocks")
	dec.Cost = d.float("cost")
	dec.Diverted = d.byte("flags")&decisionFlagDiverted != 0
	dec.DivertedBlocks = d.uint32("diverted blocks")
	reason := d.string("reason")
	if i := slices.Index(scoring.Reasons, reason); i >= 0 {
		dec.Reason = scoring.Reasons[i]
	} else {
		d.fail(fmt.Sprintf("reason %q", reason))
	}
	dec.RandomMatched = d.float("random matched")
	n := d.uvarint("candidate count")
	if d.err == nil && n > uint64(len(b)-d.off)/minCandidateBytes {
		d.fail("candidate count")
	}
	if d.err == nil {
		dec.Candidates = slices.Grow(dec.Candidates, int(n))
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		dec.Candidates = append(dec.Candidates, scoring.Candidate{
			WorkerID: d.string("candidate worker id"), DPRank: d.rank("candidate dp rank"),
			Matched:       d.uint32("candidate matched"),
			PrefillBlocks: d.float("candidate prefill"), DecodeBlocks: d.float("candidate decode"),
			Cost: d.float("candidate cost"),
		})
	}
	return nil, d.end()
}

func (d *decoder) uint32(what string) uint32 {
	v := d.uvarint(what)
	if v > math.MaxUint32 {
		d.fail(what + " out of range")
	}
	return uint32(v)
}

func (d *decoder) rank(what string) uint32 {
	v := d.uvarint(what)
	if v > 1<<31 {
		d.fail(what)
	}
	return uint32(v)
}

// end is d's error, or one for bytes left after the message.
func (d *decoder) end() error {
	if d.err == nil && d.off != len(d.b) {
		d.err = fmt.Errorf("%w: %d bytes after the message", ErrMalformed, len(d.b)-d.off)
	}
	return d.err
}
