package radix

import "testing"

// TestRepeatedHash checks the run dedupe used for runs over 32 blocks, on the
// stack and (over 512 blocks) on the heap, including engine hash 0.
func TestRepeatedHash(t *testing.T) {
	run := func(n int, hash func(i int) uint64) []Block {
		bs := make([]Block, n)
		for i := range bs {
			bs[i] = Block{EngineHash: hash(i), BlockHash: uint64(i)}
		}
		return bs
	}
	for _, n := range []int{33, 100, 512, 513, 3000} {
		distinct := run(n, func(i int) uint64 { return uint64(i) * 0x9e3779b97f4a7c15 })
		if eh, dup := repeatedHash(distinct); dup {
			t.Errorf("n=%d distinct (with hash 0): reported %#x repeated", n, eh)
		}
		// The same table slot for every hash: long probe chains.
		colliding := run(n, func(i int) uint64 { return uint64(i+1) << 40 })
		if eh, dup := repeatedHash(colliding); dup {
			t.Errorf("n=%d colliding: reported %#x repeated", n, eh)
		}
		for _, at := range []int{1, n / 2, n - 1} {
			bs := run(n, func(i int) uint64 { return uint64(i) + 7 })
			bs[at].EngineHash = bs[at-1].EngineHash
			if eh, dup := repeatedHash(bs); !dup || eh != bs[at].EngineHash {
				t.Errorf("n=%d repeat at %d: got %#x, %v", n, at, eh, dup)
			}
		}
		zeros := run(n, func(i int) uint64 { return uint64(i) })
		zeros[n-1].EngineHash = 0
		if _, dup := repeatedHash(zeros); !dup {
			t.Errorf("n=%d: engine hash 0 twice not reported", n)
		}
	}
}
