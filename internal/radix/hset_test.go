package radix

import (
	"testing"
	"unsafe"
)

// TestHsetSize keeps a holder set at 80 bytes (see setBits.n): Match reads
// one at every holder-set change of its walk.
func TestHsetSize(t *testing.T) {
	if got := unsafe.Sizeof(hset{}); got != 80 {
		t.Fatalf("hset is %d bytes, want 80", got)
	}
}
