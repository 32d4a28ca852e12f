package radix

import (
	"math/bits"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// u64map is an open-addressing hash map from uint64 to uint64: linear probing
// over one array of {key, value} slots, a multiple of 4 slots (a hash picks
// a 4-slot group by multiply-shift, and probing starts at the group's first
// slot: a large table is page-aligned, so a group is one cache line and most
// lookups read one line), deletion by backward shift so there are no
// tombstones, growth at 70% load and shrinking below 25%. Slots hold keys
// mixed by the map's keyed mix, kv.Mix(k ^ seed) (fmix64 of the key xored with
// a secret seed: a bijection, so all recovers the key), so a slot's home is one
// multiply away: the backward shift of a delete computes it for every slot of
// the cluster. Mixed key 0 marks an empty slot, so the key that mixes to 0
// (the seed itself) is kept aside.
//
// The seed is what keeps an engine from choosing keys that collide: kv.Mix is
// public and invertible (kv.Unmix), so without it the keys Unmix(1),
// Unmix(2), ... all land in group 0 and n inserts cost O(n^2) probes under
// the worker's and shard's locks. Every map of an Index takes the index's
// seed (Config.Seed, random by default); a zero-value map has seed 0, which
// is fine for tests and internal keys only.
//
// The write path uses it rather than Go maps: under insert/delete churn those
// spend most of their time probing, and their memory never shrinks.
type u64map struct {
	slots   []u64slot
	n       int // keys in slots
	seed    uint64
	hasZero bool   // the key seed (mixed: 0) is present
	zero    uint64 // its value
}

type u64slot struct{ k, v uint64 }

const minMapSize = 8

func (m *u64map) len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

// mix is the map's keyed mix: a bijection of k that depends on the seed.
func (m *u64map) mix(k uint64) uint64 { return kv.Mix(k ^ m.seed) }

// reset empties m, releasing its memory and keeping its seed.
func (m *u64map) reset() { *m = u64map{seed: m.seed} }

// home is the home slot of mixed key mk: the first of its 4-slot group.
func (m *u64map) home(mk uint64) int {
	hi, _ := bits.Mul64(mk, uint64(len(m.slots)>>2))
	return int(hi) << 2
}

// get returns the value of k.
func (m *u64map) get(k uint64) (uint64, bool) {
	if k = m.mix(k); k == 0 {
		return m.zero, m.hasZero
	}
	if len(m.slots) == 0 {
		return 0, false
	}
	s := m.slots
	for i := m.home(k); ; {
		if s[i].k == k {
			return s[i].v, true
		}
		if s[i].k == 0 {
			return 0, false
		}
		if i++; i == len(s) {
			i = 0
		}
	}
}

// first returns the key in k's home slot: a load to warm the cache with
// (k's group's line) for the probe, insert or delete to come.
func (m *u64map) first(k uint64) uint64 {
	if len(m.slots) == 0 {
		return 0
	}
	h := m.home(m.mix(k))
	return m.slots[h].k
}

// find returns a pointer to k's value, or nil. The pointer is valid until the
// next insert or delete.
func (m *u64map) find(k uint64) *uint64 {
	if k = m.mix(k); k == 0 {
		if m.hasZero {
			return &m.zero
		}
		return nil
	}
	if len(m.slots) == 0 {
		return nil
	}
	s := m.slots
	for i := m.home(k); ; {
		if s[i].k == k {
			return &s[i].v
		}
		if s[i].k == 0 {
			return nil
		}
		if i++; i == len(s) {
			i = 0
		}
	}
}

// ref returns a pointer to k's value, inserting k with value 0 if absent, and
// whether k was present. The pointer is valid until the next insert or delete.
func (m *u64map) ref(k uint64) (*uint64, bool) {
	if k = m.mix(k); k == 0 {
		had := m.hasZero
		m.hasZero = true
		return &m.zero, had
	}
	if (m.n+1)*10 > len(m.slots)*7 {
		m.resize(max(minMapSize, (len(m.slots)*3/2+4)&^3))
	}
	s := m.slots
	for i := m.home(k); ; {
		if s[i].k == k {
			return &s[i].v, true
		}
		if s[i].k == 0 {
			s[i] = u64slot{k: k}
			m.n++
			return &s[i].v, false
		}
		if i++; i == len(s) {
			i = 0
		}
	}
}

func (m *u64map) set(k, v uint64) {
	p, _ := m.ref(k)
	*p = v
}

// del removes k, shifting back the keys after it that probed past its slot.
func (m *u64map) del(k uint64) {
	if k = m.mix(k); k == 0 {
		m.hasZero, m.zero = false, 0
		return
	}
	if len(m.slots) == 0 {
		return
	}
	s := m.slots
	n := len(s)
	i := m.home(k)
	for s[i].k != k {
		if s[i].k == 0 {
			return
		}
		if i++; i == n {
			i = 0
		}
	}
	m.n--
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		if s[j].k == 0 {
			break
		}
		// Move s[j] into the hole at i unless its home lies cyclically in
		// (i, j]: unless it probed less far from its home than from the hole.
		// (Distances by compare and add: n is any size, a modulo divides.)
		fromHome, fromHole := j-m.home(s[j].k), j-i
		if fromHome < 0 {
			fromHome += n
		}
		if fromHole < 0 {
			fromHole += n
		}
		if fromHome >= fromHole {
			s[i] = s[j]
			i = j
		}
	}
	s[i] = u64slot{}
	if m.n == 0 {
		m.slots = nil
	} else if len(s) > 64 && m.n*4 < len(s) {
		m.resize((m.n*8/5 + 3) &^ 3)
	}
}

// reserve grows the table, once, to take n more keys without growing.
func (m *u64map) reserve(n int) {
	if need := m.n + n; need*10 > len(m.slots)*7 {
		m.resize(max(minMapSize, (need*10/7+4)&^3))
	}
}

func (m *u64map) resize(size int) {
	old := m.slots
	m.slots = make([]u64slot, size)
	for _, sl := range old {
		if sl.k == 0 {
			continue
		}
		for i := m.home(sl.k); ; {
			if m.slots[i].k == 0 {
				m.slots[i] = sl
				break
			}
			if i++; i == size {
				i = 0
			}
		}
	}
}

// all calls f for every key and value.
func (m *u64map) all(f func(k, v uint64)) {
	if m.hasZero {
		f(m.seed, m.zero)
	}
	for _, sl := range m.slots {
		if sl.k != 0 {
			f(kv.Unmix(sl.k)^m.seed, sl.v)
		}
	}
}

// probes returns the number of slots that finding every key in slots reads:
// for each key, one plus its distance from its home slot. A test hook: a
// table of n keys whose homes are spread needs about n probes, one whose
// keys share a group about n^2/2.
func (m *u64map) probes() int {
	total := 0
	for i, sl := range m.slots {
		if sl.k != 0 {
			d := i - m.home(sl.k)
			if d < 0 {
				d += len(m.slots)
			}
			total += d + 1
		}
	}
	return total
}
