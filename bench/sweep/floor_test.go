package sweep

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/trace"
)

func ids(from, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(from + i)
	}
	return out
}

// TestTTFTFloor: a prompt's floor counts only what earlier requests had
// computed, chunk by chunk, by its arrival.
func TestTTFTFloor(t *testing.T) {
	m := engine.Llama31H100
	// a: 20 id blocks of 512 tokens (10,240 tokens), two chunks of 8192 and 2048.
	aChunk1 := m.Duration(8192, 0, 8192)
	aFloor := aChunk1 + m.Duration(2048, 0, 10240)
	long := append(ids(0, 20), ids(100, 4)...) // a's prompt and 2,048 more tokens
	reqs := []trace.Request{
		{Arrival: 0, InputLength: 10240, HashIDs: ids(0, 20)},
		// before a's first chunk ends: nothing of a is computed yet
		{Arrival: aChunk1 / 2, InputLength: 12288, HashIDs: long},
		// after a's first chunk: its 16 leading id blocks (8,192 tokens)
		{Arrival: aChunk1 + time.Millisecond, InputLength: 12288, HashIDs: long},
		// after a ended: all of a; the request's own 2,048 tokens remain
		{Arrival: aFloor + time.Millisecond, InputLength: 12288, HashIDs: append(ids(0, 20), ids(200, 4)...)},
		// the whole prompt computed before (the third request's): one token
		{Arrival: time.Hour, InputLength: 12288, HashIDs: long},
	}
	want := []time.Duration{
		aFloor,
		m.Duration(8192, 0, 8192) + m.Duration(4096, 0, 12288),
		m.Duration(4096, 0, 12288),
		m.Duration(2048, 0, 12288),
		m.Duration(1, 0, 12288),
	}
	got := TTFTFloor(reqs, engine.SchedConfig{})
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: floor %v, want %v", i, got[i], want[i])
		}
	}
}
