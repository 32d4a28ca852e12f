package normalize

import (
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestXXH64Stripes checks xxh64Stripes against xxhash.Digest on every
// length it takes up to 8 stripes, with random seeds and bytes.
func TestXXH64Stripes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 256)
	for n := 32; n <= len(b); n += 32 {
		for range 50 {
			for i := range b[:n] {
				b[i] = byte(r.Uint32())
			}
			seed := r.Uint64()
			if r.IntN(4) == 0 {
				seed = 0
			}
			d := xxhash.NewWithSeed(seed)
			d.Write(b[:n])
			if got, want := xxh64Stripes(seed, b[:n]), d.Sum64(); got != want {
				t.Fatalf("%d bytes, seed %#x: %#x, want %#x", n, seed, got, want)
			}
		}
	}
}
