package state

import (
	"bufio"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// The snapshot benchmarks run on a fleet like the radix benchmark's: each
// rank binds 16,384 nodes, the union of the prompts it served; a prompt is
// one of 32 system prompts (8-64 blocks, skewed popularity) and a turn of a
// conversation (200,000 conversations, Zipf 1.1, up to 512 blocks), so
// popular prefixes sit on many ranks and their nodes are shared. Nodes are
// keyed by path key, in 64 shards by segment (64 blocks, then powers of
// two, as the index cuts them). A rank writes the nodes no earlier rank
// wrote, depth first, then its bindings in ref order, one engine hash per
// node, random; 85% are one copy on device, 10% one on host, 5% one on
// each.
//
// The default size is 100 ranks (1.6 M residencies, ~35 MB of test data);
// KVROUTER_BENCH_FULL=1 runs the 1000 ranks x 16,384 bindings
// (16.4 M residencies, ~350 MB of test data, and a ~180 MB file for the
// load):
//
//	KVROUTER_BENCH_FULL=1 go test -run '^$' -bench Snapshot -benchmem -benchtime 3x ./internal/state

const benchBindingsPerRank = 16384

var benchGeometry = Geometry{Shards: 64, SegmentBlocks: 64}

func benchRanks() int {
	if os.Getenv("KVROUTER_BENCH_FULL") == "1" {
		return 1000
	}
	return 100
}

var benchData struct {
	once sync.Once
	snap snapData
	c    Counts
}

// benchFleet generates the fleet once per process.
func benchFleet(b *testing.B) (snapData, Counts) {
	benchData.once.Do(func() {
		start := time.Now()
		benchData.snap = newFleetGen().snapshot(benchRanks())
		benchData.c = countOf(benchData.snap)
		b.Logf("generated %+v in %v", benchData.c, time.Since(start).Round(time.Millisecond))
	})
	return benchData.snap, benchData.c
}

type fleetGen struct {
	sys [][]uint64
}

func newFleetGen() *fleetGen {
	r := rand.New(rand.NewPCG(1, 2))
	g := &fleetGen{}
	for range 32 {
		p := make([]uint64, 8+r.IntN(57))
		for j := range p {
			p[j] = r.Uint64()
		}
		g.sys = append(g.sys, p)
	}
	return g
}

// prompt is the block hashes of a turn of conversation c (as in radix).
func (g *fleetGen) prompt(c uint64, turn int, buf []uint64) []uint64 {
	h := kv.Mix(c + 0xc0ffee)
	f := float64(h>>11) / (1 << 53)
	sp := g.sys[int(f*f*float64(len(g.sys)))]
	buf = append(buf[:0], sp...)
	n := 4 + int(h>>40)%60
	for t := 0; t < turn; t++ {
		n += 8 + int(kv.Mix(h+uint64(t))%40)
	}
	n = min(n, 512-len(sp))
	for i := range n {
		buf = append(buf, kv.Mix(h^uint64(i+1)*0x9e3779b97f4a7c15))
	}
	return buf
}

// fleetNode is a node of a rank's tree: its path key, parent (an index in
// the rank's list, -1 for the root's children) and depth.
type fleetNode struct {
	key    uint64
	parent int32
	depth  uint32
}

// rank returns rank i's tree, the union of its prompts, depth first.
func (g *fleetGen) rank(i int) []fleetNode {
	r := rand.New(rand.NewPCG(uint64(i), 77))
	zipf := rand.NewZipf(r, 1.1, 4, 200000-1)
	type node struct {
		key      uint64
		depth    uint32
		children []int32
	}
	nodes := []node{{key: 0x6b76726f75746572}} // 0: the root
	index := map[uint64]int32{}
	var buf []uint64
	for len(nodes)-1 < benchBindingsPerRank {
		buf = g.prompt(zipf.Uint64(), r.IntN(12), buf)
		cur := int32(0)
		for d, bh := range buf {
			k := kv.Mix(nodes[cur].key ^ bh*0x9e3779b97f4a7c15) // radix's path key
			next, ok := index[k]
			if !ok {
				if len(nodes)-1 == benchBindingsPerRank {
					break
				}
				next = int32(len(nodes))
				nodes = append(nodes, node{key: k, depth: uint32(d)})
				nodes[cur].children = append(nodes[cur].children, next)
				index[k] = next
			}
			cur = next
		}
	}
	out := make([]fleetNode, 0, benchBindingsPerRank)
	var walk func(id, parent int32)
	walk = func(id, parent int32) {
		for _, c := range nodes[id].children {
			out = append(out, fleetNode{key: nodes[c].key, parent: parent, depth: nodes[c].depth})
			walk(c, int32(len(out)-1))
		}
	}
	walk(0, -1)
	return out
}

// segmentStart reports whether the index starts a segment at depth d.
func segmentStart(d, seg uint32) bool {
	return d == 0 || (d%seg == 0 && bits.OnesCount32(d/seg) == 1)
}

// snapshot builds the records of n ranks: trees made two at a time, nodes
// numbered in rank order.
func (g *fleetGen) snapshot(n int) snapData {
	s := snapData{g: benchGeometry, ranks: make([]rankData, n)}
	refs := map[uint64]uint32{} // path key -> ref
	var shards []uint32         // by ref
	trees := make([][]fleetNode, 2)
	for base := 0; base < n; base += len(trees) {
		var wg sync.WaitGroup
		for k := range trees {
			if base+k < n {
				wg.Add(1)
				go func() { defer wg.Done(); trees[k] = g.rank(base + k) }()
			}
		}
		wg.Wait()
		for k, tree := range trees {
			if base+k >= n {
				break
			}
			i := base + k
			r := rand.New(rand.NewPCG(uint64(i), 78))
			rd := rankData{
				key:      kv.WorkerRank{ID: fmt.Sprintf("worker-%04d", i/4), DPRank: uint32(i % 4)},
				stream:   Stream{HasSeq: true, Seq: r.Uint64() >> 20, Epoch: "epoch-1"},
				bindings: make([]bindRec, 0, len(tree)),
			}
			own := make([]uint32, len(tree)) // refs of the tree's nodes
			for j, fn := range tree {
				ref, ok := refs[fn.key]
				if !ok {
					ref = uint32(len(shards))
					nd := nodeRec{ref: ref, parent: NoRef, key: fn.key, depth: fn.depth}
					if segmentStart(fn.depth, benchGeometry.SegmentBlocks) {
						nd.shard = uint32(kv.Mix(fn.key^0x2545f4914f6cdd1d) >> 58)
					} else {
						nd.parent = own[fn.parent]
						nd.shard = shards[nd.parent]
					}
					refs[fn.key] = ref
					shards = append(shards, nd.shard)
					rd.nodes = append(rd.nodes, nd)
				}
				own[j] = ref
			}
			slices.Sort(own)
			for _, ref := range own {
				b := bindRec{eh: r.Uint64(), ref: ref, copies: OneCopy(kv.TierDevice)}
				switch x := b.eh % 20; {
				case x < 2:
					b.copies = OneCopy(kv.TierHost)
				case x < 3:
					b.copies[kv.TierHost] = 1
				}
				rd.bindings = append(rd.bindings, b)
			}
			s.ranks[i] = rd
		}
	}
	return s
}

// cpuTime is the process's CPU time: the machine is shared, so rates per
// CPU second are reported next to those per wall second.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeBenchFile writes the fleet's snapshot to path and returns its size.
func writeBenchFile(b *testing.B, s snapData, path string) int64 {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 256<<10)
	w := NewWriter(bw, s.g)
	if err := writeSnap(w, s.ranks); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}

// BenchmarkSnapshotWrite writes the fleet's snapshot to a file.
func BenchmarkSnapshotWrite(b *testing.B) {
	s, c := benchFleet(b)
	path := filepath.Join(b.TempDir(), "bench.kvs")
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	var size int64
	for range b.N {
		size = writeBenchFile(b, s, path)
	}
	b.StopTimer()
	cpu = cpuTime() - cpu
	res := float64(c.Bindings)
	b.ReportMetric(float64(size)/res, "bytes/residency")
	b.ReportMetric(res*float64(b.N)/b.Elapsed().Seconds(), "residencies/s")
	b.ReportMetric(res*float64(b.N)/cpu.Seconds(), "residencies/cpu-s")
	b.ReportMetric(float64(size)/1e6, "MB")
	b.ReportMetric(float64(c.Nodes)/res, "nodes/residency")
}

// sumVisitor keeps a sum of what it is given.
type sumVisitor struct{ sum uint64 }

func (v *sumVisitor) Geometry(Geometry) error               { return nil }
func (v *sumVisitor) BeginRank(kv.WorkerRank, Stream) error { return nil }
func (v *sumVisitor) Node(ref, parent, shard uint32, key uint64, depth uint32) error {
	v.sum += key ^ uint64(parent) ^ uint64(shard) ^ uint64(depth)
	return nil
}
func (v *sumVisitor) Binding(eh uint64, ref uint32, copies [kv.NumTiers]uint8) error {
	v.sum += eh ^ uint64(ref) ^ uint64(copies[0])
	return nil
}
func (v *sumVisitor) EndRank() error { return nil }

// BenchmarkSnapshotLoad reads and verifies the fleet's snapshot from a file
// (in the page cache), keeping a sum.
func BenchmarkSnapshotLoad(b *testing.B) {
	s, c := benchFleet(b)
	path := filepath.Join(b.TempDir(), "bench.kvs")
	writeBenchFile(b, s, path)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for range b.N {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		got, err := ReadSnapshot(bufio.NewReaderSize(f, 256<<10), &sumVisitor{})
		if err != nil || got != c {
			b.Fatal(err, got)
		}
		f.Close()
	}
	b.StopTimer()
	cpu = cpuTime() - cpu
	res := float64(c.Bindings)
	b.ReportMetric(res*float64(b.N)/b.Elapsed().Seconds(), "residencies/s")
	b.ReportMetric(res*float64(b.N)/cpu.Seconds(), "residencies/cpu-s")
}

// BenchmarkRegistryPut1000 registers 1,000 workers one by one, each synced.
func BenchmarkRegistryPut1000(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		d, err := OpenDir(DirConfig{Path: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		reg, _, err := OpenRegistry(RegistryConfig{Dir: d})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for i := range 1000 {
			if err := reg.Put(testWorker(i)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		reg.Close()
		d.Close()
		b.StartTimer()
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/1000-puts")
}
