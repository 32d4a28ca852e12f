package kv

import (
	"testing"
)

// TestRepeated checks the hashed dedupe CheckRun uses for runs over 32 blocks, on the
// stack and (over 512 blocks) on the heap, including engine hash 0.
func TestRepeated(t *testing.T) {
	run := func(n int, hash func(i int) uint64) []Block {
		bs := make([]Block, n)
		for i := range bs {
			bs[i] = Block{EngineHash: hash(i), BlockHash: uint64(i)}
		}
		return bs
	}
	for _, n := range []int{33, 100, 512, 513, 3000} {
		distinct := run(n, func(i int) uint64 { return uint64(i) * 0x9e3779b97f4a7c15 })
		if eh, dup := repeatedBlock(distinct); dup {
			t.Errorf("n=%d distinct (with hash 0): reported %#x repeated", n, eh)
		}
		// The same table slot for every hash: long probe chains.
		colliding := run(n, func(i int) uint64 { return uint64(i+1) << 40 })
		if eh, dup := repeatedBlock(colliding); dup {
			t.Errorf("n=%d colliding: reported %#x repeated", n, eh)
		}
		for _, at := range []int{1, n / 2, n - 1} {
			bs := run(n, func(i int) uint64 { return uint64(i) + 7 })
			bs[at].EngineHash = bs[at-1].EngineHash
			if eh, dup := repeatedBlock(bs); !dup || eh != bs[at].EngineHash {
				t.Errorf("n=%d repeat at %d: got %#x, %v", n, at, eh, dup)
			}
		}
		zeros := run(n, func(i int) uint64 { return uint64(i) })
		zeros[n-1].EngineHash = 0
		if _, dup := repeatedBlock(zeros); !dup {
			t.Errorf("n=%d: engine hash 0 twice not reported", n)
		}
	}
}

func repeatedBlock(bs []Block) (uint64, bool) {
	eh, f, _ := repeated(bs, func(b Block) uint64 { return b.EngineHash }, runSeed)
	return eh, f == RunRepeated
}

// TestRepeatedCraftedRun: the hashes Unmix(i << 20) all share slot 0 of an
// unkeyed table (Mix(h) & mask == 0 for any table under 2^20 slots), so
// without a seed a run of them costs n^2/2 probes; with the process's seed
// (or any other) it stays linear. Probes are counted, not timed.
func TestRepeatedCraftedRun(t *testing.T) {
	const n = 16384
	bs := make([]Block, n)
	for i := range bs {
		bs[i].EngineHash = Unmix(uint64(i+1) << 20)
	}
	key := func(b Block) uint64 { return b.EngineHash }
	if _, f, probes := repeated(bs, key, 0); f != RunOK || probes < n*(n-1)/2 {
		t.Fatalf("unseeded: %v after %d probes; the crafted run should collide (>= %d)", f, probes, n*(n-1)/2)
	}
	for _, seed := range []uint64{runSeed, 1, 0x9e3779b97f4a7c15} {
		if _, f, probes := repeated(bs, key, seed); f != RunOK || probes > 4*n {
			t.Errorf("seed %#x: %v after %d probes, want at most %d", seed, f, probes, 4*n)
		}
	}
	if runSeed == 0 {
		t.Error("runSeed is 0")
	}
}
