package normalize

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestBatchReuse: normalizing into a Batch reuses its memory without
// corrupting the events of the current batch.
func TestBatchReuse(t *testing.T) {
	n := New(Config{})
	var b Batch
	big := mustDesc(t, `[1.0, [["BlockStored", [1, 2, 3, 4], nil, [seq(1, 64)], 16], ["BlockRemoved", [9, 8]]], 0]`)
	small := mustDesc(t, `[2.0, [["BlockStored", [5], nil, [seq(1, 16)], 16]], 0]`)
	for _, p := range [][]byte{big, small, big} {
		if err := n.Normalize(p, &b); err != nil {
			t.Fatal(err)
		}
	}
	if len(b.Events) != 2 || len(b.Events[0].Blocks) != 4 || b.Events[0].Blocks[3].EngineHash != 4 ||
		b.Events[1].EngineHashes[1] != 8 || b.TS != 1.0 {
		t.Fatalf("reused batch: %+v", b.Events)
	}
	if b.Events[0].Blocks[0].BlockHash != BlockHash(Seed("", ""), seqTokens(1, 16), nil) {
		t.Error("block hash")
	}
}

// emptyEvents is a batch [1.0, [[], [], ...], 0] of n empty events: one
// byte each on the wire.
func emptyEvents(n int) []byte {
	p := []byte{0x93, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	for range n {
		p = append(p, 0x90)
	}
	return append(p, 0)
}

// allocated returns the bytes fn allocates.
func allocated(fn func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	fn()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// TestBatchBounds: a batch costs memory bounded by the Config, not by what
// its payload claims. A 4 MiB payload of 4 million empty events is refused
// before any event is decoded (it used to cost the router about 1.8 GiB);
// a batch of MaxEvents malformed events keeps MaxErrors errors.
func TestBatchBounds(t *testing.T) {
	n := New(Config{})
	var b Batch
	huge := emptyEvents(4 << 20)
	var err error
	if a := allocated(func() { err = n.Normalize(huge, &b) }); a > 64<<10 {
		t.Errorf("refusing %d events allocated %d bytes", 4<<20, a)
	}
	if err == nil || !strings.Contains(err.Error(), "more than the 16384 a batch may have") {
		t.Fatalf("err = %v, want the batch refused for its event count", err)
	}

	full := emptyEvents(DefaultMaxEvents)
	if err := n.Normalize(full, &b); err != nil {
		t.Fatal(err)
	}
	if b.Skipped[reasonMalformedEvent] != DefaultMaxEvents || len(b.Errors) != DefaultMaxErrors {
		t.Fatalf("skipped %d, kept %d errors; want %d and %d", b.Skipped[reasonMalformedEvent], len(b.Errors),
			DefaultMaxEvents, DefaultMaxErrors)
	}
	if err := New(Config{MaxEvents: 10}).Normalize(emptyEvents(11), &b); err == nil {
		t.Error("Config.MaxEvents not applied")
	}
}

// TestBatchTrims: the scratch memory an outlier batch grew is released
// after trimWindow ordinary batches, and reused while batches need it.
func TestBatchTrims(t *testing.T) {
	n := New(Config{})
	var b Batch
	hashes := make([]string, 1<<19)
	for i := range hashes {
		hashes[i] = strconv.Itoa(i + 1)
	}
	outlier := mustDesc(t, `[1.0, [["BlockRemoved", [`+strings.Join(hashes, ", ")+`]]], 0]`)
	small := mustDesc(t, `[2.0, [["BlockStored", [5], nil, [seq(1, 16)], 16]], 0]`)
	scratch := func() int { return cap(b.raw.hashes)*8 + cap(b.hashes)*8 }
	if err := n.Normalize(outlier, &b); err != nil {
		t.Fatal(err)
	}
	if s := scratch(); s < 4<<20 {
		t.Fatalf("outlier scratch %d bytes", s)
	}
	for i := range 2 * trimWindow {
		if err := n.Normalize(small, &b); err != nil {
			t.Fatal(err)
		}
		if i < trimWindow-1 && scratch() < 4<<20 {
			t.Fatalf("scratch released after %d batches, want a window of %d", i+1, trimWindow)
		}
	}
	if s := scratch(); s > 64<<10 {
		t.Errorf("scratch still %d bytes after %d small batches", s, 2*trimWindow)
	}
	// Alternating large and small batches keep their memory.
	for range 4 * trimWindow {
		for _, p := range [][]byte{outlier, small} {
			if err := n.Normalize(p, &b); err != nil {
				t.Fatal(err)
			}
		}
	}
	if a := testing.AllocsPerRun(8, func() {
		for _, p := range [][]byte{outlier, small} {
			n.Normalize(p, &b)
		}
	}); a != 0 {
		t.Errorf("%v allocations per pair once grown, want 0", a)
	}
}
