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
	eh, f := repeated(bs, func(b Block) uint64 { return b.EngineHash })
	return eh, f == RunRepeated
}
