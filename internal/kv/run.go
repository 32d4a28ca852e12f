package kv

import (
	"math/bits"
	"math/rand/v2"
)

// RunFault says why a store run is malformed.
type RunFault uint8

// Run faults.
const (
	RunOK RunFault = iota
	// RunOwnParent: a block of the run carries the run's parent hash.
	RunOwnParent
	// RunRepeated: the run names one engine hash twice.
	RunRepeated
)

func (f RunFault) String() string {
	switch f {
	case RunOwnParent:
		return "is its own parent"
	case RunRepeated:
		return "repeated in run"
	}
	return "ok"
}

// CheckRun reports whether the engine hashes of a store run, key(s[i]) for
// each i, are distinct and exclude the parent, and if not, the hash at fault.
// It allocates nothing for runs up to 512 blocks.
func CheckRun[E any](s []E, key func(E) uint64, parent uint64, hasParent bool) (uint64, RunFault) {
	if hasParent {
		for _, e := range s {
			if key(e) == parent {
				return parent, RunOwnParent
			}
		}
	}
	if len(s) <= 32 {
		for i := 1; i < len(s); i++ {
			h := key(s[i])
			for j := 0; j < i; j++ {
				if key(s[j]) == h {
					return h, RunRepeated
				}
			}
		}
		return 0, RunOK
	}
	h, f, _ := repeated(s, key, runSeed)
	return h, f
}

// runSeed keys the slots of repeated's table: engines choose the hashes of a
// run, and Mix is public and invertible (Unmix), so unkeyed they could send a
// run whose hashes all share a slot and make the check quadratic (a 16,384-
// block run: 1.3e8 probes). One random seed per process, like the seed Go's
// maps take from the runtime, is enough: the table lives for one call, and
// no caller needs to reproduce its layout, so there is nothing to configure.
var runSeed = randomSeed()

func randomSeed() uint64 {
	for {
		if s := rand.Uint64(); s != 0 { // (math/rand/v2: ChaCha8, seeded from the OS)
			return s
		}
	}
}

// repeated finds a repeated hash with an open-addressing set on the stack (on
// the heap for runs over 512 blocks), its slots picked by Mix(h ^ seed). It
// also returns the number of slots it probed (for tests).
func repeated[E any](s []E, key func(E) uint64, seed uint64) (uint64, RunFault, int) {
	var stack [1024]uint64
	size := 1 << bits.Len(uint(2*len(s)-1)) // >= 2 len(s)
	var t []uint64
	if size <= len(stack) {
		t = stack[:size]
	} else {
		t = make([]uint64, size)
	}
	mask := uint64(size - 1)
	zero := false
	probes := 0
	for _, e := range s {
		h := key(e)
		if h == 0 { // 0 marks a free slot
			if zero {
				return 0, RunRepeated, probes
			}
			zero = true
			continue
		}
		for i := Mix(h^seed) & mask; ; i = (i + 1) & mask {
			probes++
			if t[i] == h {
				return h, RunRepeated, probes
			}
			if t[i] == 0 {
				t[i] = h
				break
			}
		}
	}
	return 0, RunOK, probes
}
