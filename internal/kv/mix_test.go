package kv

import (
	"math/rand/v2"
	"testing"
)

// TestUnmix checks that Unmix inverts Mix (radix reports its maps' keys
// through it).
func TestUnmix(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, x := range []uint64{0, 1, 2, ^uint64(0), 1 << 63, 0x9e3779b97f4a7c15} {
		if got := Unmix(Mix(x)); got != x {
			t.Fatalf("Unmix(Mix(%#x)) = %#x", x, got)
		}
	}
	for range 100000 {
		x := r.Uint64()
		if got := Unmix(Mix(x)); got != x {
			t.Fatalf("Unmix(Mix(%#x)) = %#x", x, got)
		}
	}
}
