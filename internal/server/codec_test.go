package server

import (
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// requestSeeds are encodings the fast path must take or decline correctly:
// canonical requests of every shape, and the non-canonical forms it leaves
// to protobuf.
func requestSeeds(t testing.TB) [][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	toks := make([]uint32, 1000)
	for i := range toks {
		// Every varint length: 1, 2, 3, 4 and 5 bytes.
		toks[i] = uint32(r.Uint64() >> (64 - 1 - r.IntN(32)))
	}
	temp := 0.7
	msgs := []proto.Message{
		&kvrouterv1.RouteRequest{},
		&kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks}, RequestId: "r1", Temperature: &temp, MaxCandidates: 8},
		&kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks[:7], LoraName: "lora", CacheSalt: "salt"}},
		&kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", BlockHashes: []uint64{0, 1, 1 << 63, ^uint64(0)}}},
		&kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: []uint32{1, 2, 3},
			MmItems: []*kvrouterv1.MultimodalItem{{Hash: "h", Offset: 1, Length: 2}}}},
		&kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{}},
		&kvrouterv1.ScoreRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks[:100]}},
		&kvrouterv1.ScoreRequest{},
	}
	var seeds [][]byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	// Unpacked token_ids, a 10-byte token varint, an unknown field, a
	// repeated field, invalid UTF-8, a truncated message.
	var unpacked []byte
	for _, v := range []uint64{5, 300, 70000} {
		unpacked = protowire.AppendTag(unpacked, 2, protowire.VarintType)
		unpacked = protowire.AppendVarint(unpacked, v)
	}
	long := protowire.AppendVarint(nil, 1<<40|7)
	packedLong := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), append([]byte{1, 2}, long...))
	wrap := func(prompt []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), prompt)
	}
	seeds = append(seeds,
		wrap(unpacked),
		wrap(packedLong),
		append(slices.Clip(seeds[1]), protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 3)...),
		append(slices.Clip(seeds[1]), protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 3)...),
		wrap(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff, 0xfe})),
		seeds[1][:len(seeds[1])-3],
	)
	return seeds
}

// checkDecode decodes b with the fast path and with proto.Unmarshal: when the
// fast path takes b, protobuf must accept it too and mean the same message.
func checkDecode(t *testing.T, b []byte) (routeFast, scoreFast bool) {
	t.Helper()
	var fr, pr kvrouterv1.RouteRequest
	routeFast = decodeRouteRequest(b, &fr)
	err := proto.Unmarshal(b, &pr)
	if routeFast && (err != nil || !proto.Equal(&fr, &pr)) {
		t.Fatalf("RouteRequest %x: fast path %v, protobuf %v (err %v)", b, &fr, &pr, err)
	}
	if !routeFast && !proto.Equal(&fr, &kvrouterv1.RouteRequest{}) {
		t.Fatalf("RouteRequest %x: declined but wrote %v", b, &fr)
	}
	// Into a message an earlier request was decoded into (a stream's or a
	// pool's): with token_ids memory too short and long enough, and unknown
	// fields of its own.
	for _, room := range []int{3, 1 << 12} {
		old := &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "old", TokenIds: make([]uint32, 3, room),
			BlockHashes: make([]uint64, 1, room), LoraName: "l", CacheSalt: "c"}, RequestId: "old", MaxCandidates: 9}
		old.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
		if decodeRouteRequest(b, old) != routeFast {
			t.Fatalf("RouteRequest %x: fast path %v on a new message, not on a reused one", b, routeFast)
		}
		if routeFast && !proto.Equal(old, &pr) {
			t.Fatalf("RouteRequest %x into a reused message: fast path %v, protobuf %v", b, old, &pr)
		}
	}
	var fs, ps kvrouterv1.ScoreRequest
	scoreFast = decodeScoreRequest(b, &fs)
	err = proto.Unmarshal(b, &ps)
	if scoreFast && (err != nil || !proto.Equal(&fs, &ps)) {
		t.Fatalf("ScoreRequest %x: fast path %v, protobuf %v (err %v)", b, &fs, &ps, err)
	}
	if !scoreFast && !proto.Equal(&fs, &kvrouterv1.ScoreRequest{}) {
		t.Fatalf("ScoreRequest %x: declined but wrote %v", b, &fs)
	}
	return routeFast, scoreFast
}

func TestRequestDecode(t *testing.T) {
	seeds := requestSeeds(t)
	want := []bool{true, true, true, true, false, true, true, true, false, false, false, false, false, false}
	if len(want) != len(seeds) {
		t.Fatalf("%d seeds, %d expectations", len(seeds), len(want))
	}
	for i, b := range seeds {
		route, _ := checkDecode(t, b)
		if route != want[i] {
			t.Errorf("seed %d: fast path took it %v, want %v", i, route, want[i])
		}
	}
	// Token ids decoded word by word, at every alignment and length.
	r := rand.New(rand.NewPCG(3, 4))
	for n := range 300 {
		toks := make([]uint32, n)
		for i := range toks {
			toks[i] = uint32(r.Uint64() >> (64 - 1 - r.IntN(32)))
		}
		var b []byte
		for _, v := range toks {
			b = protowire.AppendVarint(b, uint64(v))
		}
		// Into new memory, and into reused memory too short and long enough.
		for _, room := range []int{0, n / 2, 2 * n} {
			got, ok := decodePackedUint32(b, make([]uint32, room))
			if !ok || len(got) != len(toks) || (room < n && cap(got) != len(toks)) {
				t.Fatalf("%d tokens into %d: ok %v, %d decoded (cap %d)", n, room, ok, len(got), cap(got))
			}
			for i := range toks {
				if got[i] != toks[i] {
					t.Fatalf("%d tokens into %d: token %d = %d, want %d", n, room, i, got[i], toks[i])
				}
			}
		}
	}
}

func FuzzRequestDecode(f *testing.F) {
	for _, b := range requestSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
	})
}

// BenchmarkRequestDecode compares the fast path with proto.Unmarshal on an
// 8,192-token RouteRequest with token ids like a 150k vocabulary's.
// BenchmarkRequestDecode decodes 64 different 8,192-token requests in turn:
// one request decoded over and over lets the branch predictor learn its
// varint lengths, which a router never sees.
func BenchmarkRequestDecode(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	msgs := make([][]byte, 64)
	for k := range msgs {
		toks := make([]uint32, 8192)
		for i := range toks {
			toks[i] = uint32(r.IntN(150000))
		}
		var err error
		msgs[k], err = proto.Marshal(&kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "model", TokenIds: toks}, RequestId: "req-1"})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(msgs[0])))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			var m kvrouterv1.RouteRequest
			if !decodeRouteRequest(msgs[i%len(msgs)], &m) {
				b.Fatal("declined")
			}
			i++
		}
	})
	b.Run("fast-reused", func(b *testing.B) { // a stream's or a pooled request
		b.SetBytes(int64(len(msgs[0])))
		b.ReportAllocs()
		var m kvrouterv1.RouteRequest
		i := 0
		for b.Loop() {
			if !decodeRouteRequest(msgs[i%len(msgs)], &m) {
				b.Fatal("declined")
			}
			i++
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.SetBytes(int64(len(msgs[0])))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			var m kvrouterv1.RouteRequest
			if err := proto.Unmarshal(msgs[i%len(msgs)], &m); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// TestCodecUnmarshal runs the codec itself on requests split over several
// buffers: one the fast path takes, one it declines (multimodal items), and
// a malformed one, whose error must be protobuf's.
func TestCodecUnmarshal(t *testing.T) {
	c := newCodec()
	seeds := requestSeeds(t)
	split := func(b []byte) mem.BufferSlice {
		n := len(b) / 3
		return mem.BufferSlice{mem.SliceBuffer(b[:n]), mem.SliceBuffer(b[n : 2*n]), mem.SliceBuffer(b[2*n:])}
	}
	for _, i := range []int{1, 4} { // fast path; mm_items, declined
		var got, want kvrouterv1.RouteRequest
		if err := c.Unmarshal(split(slices.Clone(seeds[i])), &got); err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		if err := proto.Unmarshal(seeds[i], &want); err != nil || !proto.Equal(&got, &want) {
			t.Fatalf("seed %d: codec %v, protobuf %v (%v)", i, &got, &want, err)
		}
	}
	bad := seeds[len(seeds)-1] // truncated
	var m kvrouterv1.RouteRequest
	if err, want := c.Unmarshal(split(slices.Clone(bad)), &m), proto.Unmarshal(bad, new(kvrouterv1.RouteRequest)); err == nil || err.Error() != want.Error() {
		t.Fatalf("truncated request: codec error %v, protobuf %v", err, want)
	}
}
