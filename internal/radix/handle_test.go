package radix

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestHandle: a Handle reads what Index.Cached does, stops at RemoveWorker
// even once its slot has a new owner, and a worker/rank stored again has a
// new Handle.
func TestHandle(t *testing.T) {
	ix := New(Config{CheckInvariants: true, SlotReuseDelay: -1})
	a, b := kv.WorkerRank{ID: "a"}, kv.WorkerRank{ID: "b"}
	if _, ok := ix.Handle(a); ok {
		t.Fatal("a handle for a worker/rank that stored nothing")
	}
	storeOne(t, ix, a, 1, 10)
	h, ok := ix.Handle(a)
	if !ok {
		t.Fatal("no handle after a store")
	}
	storeOne(t, ix, a, 2, 20)
	if n, ok := h.Cached(); !ok || n != ix.Cached(a) || n != 2 {
		t.Fatalf("Cached through the handle: %d, %v; Index.Cached %d; want 2", n, ok, ix.Cached(a))
	}
	ix.RemoveWorker("a")
	storeOne(t, ix, b, 3, 30) // may take a's slot (no reuse delay)
	storeOne(t, ix, b, 4, 40)
	if n, ok := h.Cached(); ok {
		t.Fatalf("a removed worker's handle reads %d (b holds %d)", n, ix.Cached(b))
	}
	storeOne(t, ix, a, 5, 50)
	h2, ok := ix.Handle(a)
	if n, ok2 := h2.Cached(); !ok || !ok2 || n != 1 {
		t.Fatalf("a stored again: handle %v, cached %d, %v; want 1", ok, n, ok2)
	}
}
