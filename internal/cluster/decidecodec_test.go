package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/internal/scoring"
)

func sampleRoute() *scoring.ForwardedRoute {
	return &scoring.ForwardedRoute{Model: "llama", Hashes: []uint64{1, 2, 1 << 63}, Tokens: 50,
		RequestID: "req-1", Temperature: 0.25, MaxCandidates: 3}
}

func sampleDecision() *scoring.Decision {
	return &scoring.Decision{WorkerID: "engine-1", DPRank: 2, Endpoint: "10.0.0.1:8000", Matched: 7, PromptBlocks: 9,
		Cost: 1.5, Diverted: true, DivertedBlocks: 3, Reason: scoring.ReasonGuard, RandomMatched: 2.25,
		Candidates: []scoring.Candidate{
			{WorkerID: "engine-1", DPRank: 2, Matched: 7, PrefillBlocks: 2, DecodeBlocks: 40, Cost: 1.5},
			{WorkerID: "engine-0", Matched: 0, PrefillBlocks: 9, DecodeBlocks: 3, Cost: 1.25},
		}}
}

// TestDecideCodecRoundTrip: a route, a decision and a refusal decode to
// what was encoded; decoding reuses the destination's memory.
func TestDecideCodecRoundTrip(t *testing.T) {
	fr := scoring.ForwardedRoute{Hashes: make([]uint64, 0, 8)}
	if err := decodeRoute(appendRoute(nil, sampleRoute()), &fr); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&fr, sampleRoute()) {
		t.Fatalf("route: got %+v, want %+v", fr, *sampleRoute())
	}
	dec := scoring.Decision{Candidates: make([]scoring.Candidate, 0, 4)}
	if refused, err := decodeDecision(appendDecision(nil, sampleDecision()), &dec); err != nil || refused != nil {
		t.Fatalf("decision: %+v, %v", refused, err)
	}
	if !reflect.DeepEqual(&dec, sampleDecision()) {
		t.Fatalf("decision: got %+v, want %+v", dec, *sampleDecision())
	}
	refused, err := decodeDecision(appendRefused(nil, errors.New("no registered worker serves model \"x\"")), &dec)
	if err != nil || *refused != (refusal{refusedDecideHere, `no registered worker serves model "x"`}) {
		t.Fatalf("refusal: %+v, %v", refused, err)
	}
	refused, err = decodeDecision(appendRefused(nil, fmt.Errorf("%w: request_id %q is already active", scoring.ErrAlreadyExists, "q")), &dec)
	if err != nil || refused.class != refusedAlreadyExists {
		t.Fatalf("refusal of an active id: %+v, %v", refused, err)
	}
}

// TestDecideCodecRefusesDamage: every truncation and a set of corruptions
// of valid messages are refused with ErrMalformed, never a panic, and a
// count larger than the message could hold is refused before anything is
// allocated for it.
func TestDecideCodecRefusesDamage(t *testing.T) {
	msgs := map[string][]byte{
		"route":    appendRoute(nil, sampleRoute()),
		"decision": appendDecision(nil, sampleDecision()),
		"refused":  appendRefused(nil, errors.New("busy")),
	}
	classless := appendRefused(nil, errors.New("busy"))
	classless[4] = 9
	if _, err := decodeDecision(classless, &scoring.Decision{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unknown refusal class: %v", err)
	}
	decode := func(name string, b []byte) error {
		if name == "route" {
			return decodeRoute(b, &scoring.ForwardedRoute{})
		}
		_, err := decodeDecision(b, &scoring.Decision{})
		return err
	}
	for name, b := range msgs {
		for n := range len(b) {
			if err := decode(name, b[:n]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s truncated to %d bytes: %v; want ErrMalformed", name, n, err)
			}
		}
		for what, mut := range map[string]func([]byte) []byte{
			"magic":    func(b []byte) []byte { b[1] = 'L'; return b },
			"version":  func(b []byte) []byte { b[2] = 9; return b },
			"kind":     func(b []byte) []byte { b[3] = 7; return b },
			"trailing": func(b []byte) []byte { return append(b, 0) },
		} {
			c := mut(append([]byte(nil), b...))
			if err := decode(name, c); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s, %s: %v; want ErrMalformed", name, what, err)
			}
		}
	}
	if err := decode("route", appendRoute(nil, &scoring.ForwardedRoute{Model: "m"})[:0]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty: %v", err)
	}
	huge := appendDecideHeader(nil, kindRoute)
	huge = appendString(huge, "m")
	huge = append(huge, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f)
	if err := decode("route", huge); !errors.Is(err, ErrMalformed) {
		t.Fatalf("huge hash count: %v", err)
	}
	bad := sampleDecision()
	bad.Reason = "whim"
	if err := decode("decision", appendDecision(nil, bad)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unknown reason: %v", err)
	}
}

func FuzzDecodeRoute(f *testing.F) {
	f.Add(appendRoute(nil, sampleRoute()))
	f.Add(appendRoute(nil, &scoring.ForwardedRoute{Model: "m", Hashes: []uint64{7}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr scoring.ForwardedRoute
		if err := decodeRoute(b, &fr); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("an error not ErrMalformed: %v", err)
			}
			return
		}
		if len(fr.Hashes)*8 > len(b) {
			t.Fatalf("%d hashes from %d bytes", len(fr.Hashes), len(b))
		}
		// What decodes re-encodes to a message that decodes the same.
		once := appendRoute(nil, &fr)
		var again scoring.ForwardedRoute
		if err := decodeRoute(once, &again); err != nil || !bytes.Equal(appendRoute(nil, &again), once) {
			t.Fatalf("re-encoding a decoded route: %v", err)
		}
	})
}

func FuzzDecodeDecision(f *testing.F) {
	f.Add(appendDecision(nil, sampleDecision()))
	f.Add(appendRefused(nil, fmt.Errorf("busy")))
	f.Fuzz(func(t *testing.T, b []byte) {
		var dec scoring.Decision
		refused, err := decodeDecision(b, &dec)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("an error not ErrMalformed: %v", err)
			}
			return
		}
		if refused != nil {
			return
		}
		if len(dec.Candidates)*minCandidateBytes > len(b) {
			t.Fatalf("%d candidates from %d bytes", len(dec.Candidates), len(b))
		}
		once := appendDecision(nil, &dec)
		var again scoring.Decision
		if _, err := decodeDecision(once, &again); err != nil || !bytes.Equal(appendDecision(nil, &again), once) {
			t.Fatalf("re-encoding a decoded decision: %v", err)
		}
	})
}
