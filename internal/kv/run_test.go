package kv

import (
	"math/rand/v2"
	"testing"
)

func id(h uint64) uint64 { return h }

func TestCheckRun(t *testing.T) {
	for _, tc := range []struct {
		name      string
		run       []uint64
		parent    uint64
		hasParent bool
		at        uint64
		fault     RunFault
	}{
		{"empty", nil, 0, false, 0, RunOK},
		{"distinct", []uint64{1, 2, 3}, 9, true, 0, RunOK},
		{"parent zero unset", []uint64{0, 1}, 0, false, 0, RunOK},
		{"own parent", []uint64{1, 9, 3}, 9, true, 9, RunOwnParent},
		{"repeat short", []uint64{1, 2, 1}, 0, false, 1, RunRepeated},
	} {
		at, f := CheckRun(tc.run, id, tc.parent, tc.hasParent)
		if at != tc.at || f != tc.fault {
			t.Errorf("%s: got (%#x, %v), want (%#x, %v)", tc.name, at, f, tc.at, tc.fault)
		}
	}
}

// TestCheckRunLong checks the hashed path (runs over 32) against a map, on
// runs with and without one repeat, including repeated zeros and runs over
// the stack table's 512 blocks.
func TestCheckRunLong(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{33, 100, 512, 513, 2000} {
		for trial := 0; trial < 50; trial++ {
			run := make([]uint64, n)
			for i := range run {
				run[i] = r.Uint64() >> (r.IntN(3) * 30) // small values too
			}
			if trial%3 == 0 {
				run[r.IntN(n)] = 0
			}
			if trial%2 == 1 {
				i, j := r.IntN(n), r.IntN(n)
				if i == j {
					j = (i + 1) % n
				}
				run[i] = run[j]
			}
			seen := map[uint64]bool{}
			want := RunOK
			for _, h := range run {
				if seen[h] {
					want = RunRepeated
				}
				seen[h] = true
			}
			at, got := CheckRun(run, id, 0, false)
			if got != want {
				t.Fatalf("n=%d trial %d: fault %v, want %v", n, trial, got, want)
			}
			if got == RunRepeated {
				c := 0
				for _, h := range run {
					if h == at {
						c++
					}
				}
				if c < 2 {
					t.Fatalf("n=%d trial %d: %#x reported repeated, seen %d times", n, trial, at, c)
				}
			}
		}
	}
}

func TestCheckRunAllocs(t *testing.T) {
	run := make([]Block, 512)
	for i := range run {
		run[i].EngineHash = uint64(i + 1)
	}
	key := func(b Block) uint64 { return b.EngineHash }
	if a := testing.AllocsPerRun(10, func() { CheckRun(run, key, 0, false) }); a != 0 {
		t.Fatalf("CheckRun of 512 blocks allocates %v times", a)
	}
}

func TestTierString(t *testing.T) {
	if TierHost.String() != "host" || Tier(7).String() != "tier(7)" {
		t.Fatalf("got %q, %q", TierHost, Tier(7))
	}
}
