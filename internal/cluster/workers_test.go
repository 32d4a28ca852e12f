package cluster

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
)

// TestWorkerCodec: a registration reads back as written, with its source;
// a value of another version, cut short, or whose Worker does not decode
// is ErrBadRegistration.
func TestWorkerCodec(t *testing.T) {
	w := &kvrouterv1.Worker{WorkerId: "w-1", Model: "m", Endpoint: "h:8000", KvEventsEndpoint: "tcp://h:5557", DpSize: 4, Topic: "kv"}
	for _, src := range []fleet.Source{fleet.SourceConfig, fleet.SourceAPI, fleet.SourceDiscovery} {
		b, err := EncodeWorker(w, src)
		if err != nil {
			t.Fatal(err)
		}
		got, gotSrc, err := DecodeWorker(b)
		if err != nil || gotSrc != src || !proto.Equal(got, w) {
			t.Fatalf("%s: decoded %v, %q, %v; want %v, %q", src, got, gotSrc, err, w, src)
		}
	}
	good, _ := EncodeWorker(w, fleet.SourceAPI)
	for name, b := range map[string][]byte{
		"empty":       nil,
		"version 2":   append([]byte{2}, good[1:]...),
		"source cut":  good[:4],
		"bad worker":  append(append([]byte{}, good[:2+len(fleet.SourceAPI)]...), 0xff, 0xff),
		"one byte":    {1},
		"source long": {1, 200, 'a'},
	} {
		if _, _, err := DecodeWorker(b); !errors.Is(err, ErrBadRegistration) {
			t.Errorf("%s: %v; want ErrBadRegistration", name, err)
		}
	}
	if _, err := EncodeWorker(w, fleet.Source(make([]byte, 256))); err == nil {
		t.Fatal("a 256-byte source encoded")
	}
}

// FuzzDecodeWorker: any value decodes or is refused, never a panic; what
// decodes encodes back to a value that decodes alike.
func FuzzDecodeWorker(f *testing.F) {
	good, _ := EncodeWorker(&kvrouterv1.Worker{WorkerId: "w", Model: "m", DpSize: 2}, fleet.SourceConfig)
	f.Add(good)
	f.Add([]byte{1, 0})
	f.Add([]byte{1, 3, 'a', 'p', 'i', 0x0a, 0x01, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		w, src, err := DecodeWorker(b)
		if err != nil {
			if !errors.Is(err, ErrBadRegistration) {
				t.Fatalf("error %v is not ErrBadRegistration", err)
			}
			return
		}
		again, err := EncodeWorker(w, src)
		if err != nil {
			t.Fatal(err)
		}
		w2, src2, err := DecodeWorker(again)
		if err != nil || src2 != src || !proto.Equal(w, w2) {
			t.Fatalf("re-encoded %v %q decodes as %v %q %v", w, src, w2, src2, err)
		}
	})
}
