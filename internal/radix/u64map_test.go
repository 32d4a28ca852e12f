package radix

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestU64Map drives u64map and a Go map with the same random inserts,
// updates and deletes (including key 0 and keys that collide on small
// tables) and compares them after every step.
func TestU64Map(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var m u64map
	ref := map[uint64]uint64{}
	keys := func() uint64 {
		if r.IntN(20) == 0 {
			return 0
		}
		return uint64(r.IntN(3000))
	}
	for step := range 200000 {
		k := keys()
		op := r.IntN(3)
		if step > 150000 {
			op = 2 // a phase of deletes only, to exercise shrinking
		}
		switch op {
		case 0, 1:
			v := r.Uint64()
			p, had := m.ref(k)
			if _, want := ref[k]; had != want {
				t.Fatalf("step %d: ref(%d) present %v, want %v", step, k, had, want)
			}
			*p = v
			ref[k] = v
		case 2:
			m.del(k)
			delete(ref, k)
		}
		if m.len() != len(ref) {
			t.Fatalf("step %d: len %d want %d", step, m.len(), len(ref))
		}
		if step%1000 == 0 {
			for k, v := range ref {
				if got, ok := m.get(k); !ok || got != v {
					t.Fatalf("step %d: get(%d) = %d, %v want %d", step, k, got, ok, v)
				}
			}
			n := 0
			m.all(func(k, v uint64) {
				n++
				if ref[k] != v {
					t.Fatalf("step %d: all: %d=%d want %d", step, k, v, ref[k])
				}
			})
			if n != len(ref) {
				t.Fatalf("step %d: all visited %d of %d", step, n, len(ref))
			}
			for range 20 {
				absent := uint64(3000 + r.IntN(1000))
				if _, ok := m.get(absent); ok {
					t.Fatalf("step %d: absent key %d found", step, absent)
				}
			}
		}
	}
	if len(ref) > 100 || len(m.slots) > 1024 {
		// The delete-heavy phase must have shrunk the table.
		t.Fatalf("after the delete phase: %d keys, %d slots", len(ref), len(m.slots))
	}
}

// TestU64MapLarge grows a map to 150,000 keys, checks every key, and deletes
// them all in random order through every shrink, which must not thrash. At
// every size the table must be whole cache-line groups.
func TestU64MapLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var m u64map
	keys := make([]uint64, 150000)
	checkLines := func() {
		t.Helper()
		// A key's group is one cache line: whole groups, on a line boundary
		// in large tables (which Go allocates page-aligned).
		if len(m.slots)%4 != 0 {
			t.Fatalf("%d slots: not whole 4-slot groups", len(m.slots))
		}
		if len(m.slots) >= 4096 && uintptr(unsafe.Pointer(&m.slots[0]))%64 != 0 {
			t.Fatalf("%d slots at %p: groups straddle cache lines", len(m.slots), &m.slots[0])
		}
	}
	for i := range keys {
		keys[i] = r.Uint64() | 1
		m.set(keys[i], uint64(i))
		checkLines()
	}
	for i, k := range keys {
		if v, ok := m.get(k); !ok || v != uint64(i) {
			t.Fatalf("get(%x) = %d, %v; want %d", k, v, ok, i)
		}
	}
	resizes, last := 0, len(m.slots)
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for i, k := range keys {
		m.del(k)
		if len(m.slots) != last {
			resizes++
			last = len(m.slots)
			if m.slots != nil {
				checkLines()
			}
		}
		if m.len() != len(keys)-i-1 {
			t.Fatalf("after %d deletes len %d", i+1, m.len())
		}
		if i%10000 == 0 {
			for _, k2 := range keys[i+1:] {
				if _, ok := m.get(k2); !ok {
					t.Fatalf("after %d deletes %x is gone", i+1, k2)
				}
			}
		}
	}
	if m.slots != nil {
		t.Fatalf("empty map keeps %d slots", len(m.slots))
	}
	if resizes > 20 {
		t.Fatalf("%d resizes while deleting 150,000 keys: shrinking thrashes", resizes)
	}
}

// BenchmarkU64MapChurn keeps a worker-map-sized u64map (16,384 keys, the
// benchmark fleet's capacity, at which the table is 52% full; and fewer keys,
// up to the 70% that grows a table) under insert-newest/delete-oldest churn:
// one op is one insert and one delete.
func BenchmarkU64MapChurn(b *testing.B) {
	for _, n := range []int{11600, 14700, 16384} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) { benchU64MapChurn(b, n) })
	}
}

func benchU64MapChurn(b *testing.B, n int) {
	r := rand.New(rand.NewPCG(9, 10))
	keys := make([]uint64, n)
	var m u64map
	for i := range keys {
		keys[i] = r.Uint64()
		m.set(keys[i], uint64(i))
	}
	load := float64(m.len()) / float64(len(m.slots))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i % n
		m.del(keys[j])
		keys[j] = r.Uint64()
		m.set(keys[j], uint64(i))
	}
	b.ReportMetric(load, "load")
}

// TestU64MapCraftedKeys: Unmix(i) mixes, unkeyed (seed 0), to i, so 10,000
// such keys share group 0 of any table under 2^48 groups and the map costs
// n^2/2 probes; keyed by a seed the same keys spread and it stays linear.
// Probes are counted (u64map.probes), not timed. all reports the original
// keys in both cases.
func TestU64MapCraftedKeys(t *testing.T) {
	const n = 10000
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = kv.Unmix(uint64(i + 1))
	}
	for _, seed := range []uint64{0, 1, 0x2545f4914f6cdd1d, New(Config{}).seed} {
		m := u64map{seed: seed}
		for i, k := range keys {
			m.set(k, uint64(i))
		}
		m.set(seed, 7) // the key that mixes to 0
		p := m.probes()
		if seed == 0 {
			if p < n*(n-1)/2 {
				t.Fatalf("unseeded: %d probes, want the crafted keys to collide (>= %d)", p, n*(n-1)/2)
			}
		} else if p > 6*n {
			// A random seed (New's) puts the count at 2.8-3.1n (300
			// seeds), so 3n failed at times; colliding keys would cost
			// n/2 probes each, not 6.
			t.Errorf("seed %#x: %d probes for %d keys, want linear (<= %d)", seed, p, n, 6*n)
		}
		got := map[uint64]uint64{}
		m.all(func(k, v uint64) { got[k] = v })
		if len(got) != n+1 || got[seed] != 7 {
			t.Fatalf("seed %#x: all reports %d keys (seed key: %d)", seed, len(got), got[seed])
		}
		for i, k := range keys {
			if got[k] != uint64(i) {
				t.Fatalf("seed %#x: all reports key %#x as %d, want %d", seed, k, got[k], i)
			}
			if v, ok := m.get(k); !ok || v != uint64(i) {
				t.Fatalf("seed %#x: get(%#x) = %d, %v", seed, k, v, ok)
			}
		}
		for _, k := range keys {
			m.del(k)
		}
		if m.len() != 1 {
			t.Fatalf("seed %#x: %d keys left", seed, m.len())
		}
	}
}

// TestIndexCraftedEngineHashes stores a run of crafted engine hashes (see
// TestU64MapCraftedKeys) for one worker: the worker map stays linear, with
// the index's configured seed and with a random one.
func TestIndexCraftedEngineHashes(t *testing.T) {
	const n = 20000
	blocks := make([]kv.Block, n)
	for i := range blocks {
		blocks[i] = kv.Block{EngineHash: kv.Unmix(uint64(i + 1)), BlockHash: uint64(i + 1)}
	}
	w := kv.WorkerRank{ID: "w"}
	for _, seed := range []uint64{0, 12345} {
		ix := New(Config{Seed: seed})
		if seed != 0 && ix.seed != seed {
			t.Fatalf("seed %d: index seed %d", seed, ix.seed)
		}
		if err := ix.Store(w, 0, false, kv.TierDevice, blocks); err != nil {
			t.Fatal(err)
		}
		ws := ix.reg.get(w)
		if p := ws.blocks.probes(); p > 3*n {
			t.Errorf("seed %d: worker map needs %d probes for %d keys", seed, p, n)
		}
		if err := ix.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
}
