package radix

import (
	"math/rand/v2"
	"testing"
)

// TestUnfmix64 checks that unfmix64 inverts fmix64 (u64map.all reports keys
// through it).
func TestUnfmix64(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, x := range []uint64{0, 1, 2, ^uint64(0), 1 << 63, 0x9e3779b97f4a7c15} {
		if got := unfmix64(fmix64(x)); got != x {
			t.Fatalf("unfmix64(fmix64(%#x)) = %#x", x, got)
		}
	}
	for range 100000 {
		x := r.Uint64()
		if got := unfmix64(fmix64(x)); got != x {
			t.Fatalf("unfmix64(fmix64(%#x)) = %#x", x, got)
		}
	}
}
