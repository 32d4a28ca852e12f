package cluster

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/scoring"
)

func sampleMessage() Message {
	return Message{
		Header: Header{Kind: kindChanges, Origin: "replica-1", Epoch: 1_800_000_000_000, Seq: 42, HasDigest: true, Digest: Digest{Count: 3, Sum: 0xdeadbeef}},
		Changes: []scoring.LoadChange{
			{Kind: scoring.ChangeRoute, RequestID: "req-1", WorkerID: "w/1", DPRank: 3, PrefillBlocks: 7, PrefillTokens: 100, DecodeBlocks: 9,
				Predicted: []uint64{1, 1 << 63, 12345}},
			{Kind: scoring.ChangeRoute, WorkerID: "w2", PrefillDone: true, TTL: 1500 * time.Millisecond},
			{Kind: scoring.ChangePrefillDone, RequestID: "req-1"},
			{Kind: scoring.ChangeFinished, RequestID: "req-2"},
		},
	}
}

func TestCodecRoundTrip(t *testing.T) {
	m := sampleMessage()
	b := EncodeMessage(m)
	got, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got.Changes {
		if len(got.Changes[i].Predicted) == 0 {
			got.Changes[i].Predicted = nil
		}
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
	}
	// A route of 64 predicted blocks stays compact: ~8 bytes a key plus
	// a few dozen for the rest.
	route := Message{Header: Header{Kind: kindChanges, Origin: "a", Seq: 1}, Changes: []scoring.LoadChange{{
		Kind: scoring.ChangeRoute, RequestID: "0123456789abcdef", WorkerID: "worker-17", PrefillBlocks: 64, PrefillTokens: 1024,
		DecodeBlocks: 80, Predicted: make([]uint64, 64)}}}
	if n := len(EncodeMessage(route)); n > 64*8+64 {
		t.Fatalf("a 64-block route encodes to %d bytes", n)
	}
}

// TestCodecRefusesDamage: every truncation and a set of corruptions of a
// valid message are refused with ErrMalformed, never a panic.
func TestCodecRefusesDamage(t *testing.T) {
	b := EncodeMessage(sampleMessage())
	for n := range len(b) {
		if _, err := DecodeMessage(b[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated to %d bytes: %v; want ErrMalformed", n, err)
		}
	}
	for name, mut := range map[string]func([]byte){
		"magic":    func(b []byte) { b[0] = 'X' },
		"version":  func(b []byte) { b[2] = 9 },
		"kind":     func(b []byte) { b[3] = 7 },
		"trailing": nil,
	} {
		c := append([]byte(nil), b...)
		if mut != nil {
			mut(c)
		} else {
			c = append(c, 0)
		}
		if _, err := DecodeMessage(c); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s: %v; want ErrMalformed", name, err)
		}
	}
	// A change count or key count larger than the message could hold is
	// refused before anything is allocated for it.
	huge := appendHeader(nil, &Header{Kind: kindChanges, Origin: "a", Seq: 1}, 1<<40)
	if _, err := DecodeMessage(huge); !errors.Is(err, ErrMalformed) {
		t.Fatalf("huge change count: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(EncodeMessage(sampleMessage()))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to a message that decodes the same.
		m2, err := DecodeMessage(EncodeMessage(m))
		if err != nil || len(m2.Changes) != len(m.Changes) || m2.Header != m.Header {
			t.Fatalf("re-encoding a decoded message: %v", err)
		}
	})
}
