package state

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// The snapshot benchmarks run on a fleet like the radix benchmark's: each
// rank holds 16,384 blocks, the union of the prompts it served; a prompt is
// one of 32 system prompts (8-64 blocks, skewed popularity) and a turn of a
// conversation (200,000 conversations, Zipf 1.1, up to 512 blocks), so
// popular prefixes sit on many ranks and their router block hashes repeat
// across ranks. Engine hashes are random per rank and prefix. Blocks are
// written depth first; 85% are one copy on device, 10% one on host, 5% one
// on each.
//
// The default size is 100 ranks (1.6 M residencies, ~40 MB of test data);
// KVROUTER_BENCH_FULL=1 runs the 1000 ranks x 16,384 blocks (16.4
// M residencies, ~400 MB of test data, and a ~200 MB file for the load):
//
//	KVROUTER_BENCH_FULL=1 go test -run '^$' -bench Snapshot -benchmem -benchtime 3x ./internal/state

const benchBlocksPerRank = 16384

func benchRanks() int {
	if os.Getenv("KVROUTER_BENCH_FULL") == "1" {
		return 1000
	}
	return 100
}

var benchData struct {
	once  sync.Once
	ranks []rankData
	res   uint64
}

// benchFleet generates the fleet once per process.
func benchFleet(b *testing.B) ([]rankData, uint64) {
	benchData.once.Do(func() {
		start := time.Now()
		g := newFleetGen()
		n := benchRanks()
		benchData.ranks = make([]rankData, n)
		var wg sync.WaitGroup
		for part := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := part; i < n; i += 2 {
					benchData.ranks[i] = g.rank(i)
				}
			}()
		}
		wg.Wait()
		benchData.res = countOf(benchData.ranks).Residencies
		b.Logf("generated %d ranks, %d residencies in %v", n, benchData.res, time.Since(start).Round(time.Millisecond))
	})
	return benchData.ranks, benchData.res
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
	h := fmix64(c + 0xc0ffee)
	f := float64(h>>11) / (1 << 53)
	sp := g.sys[int(f*f*float64(len(g.sys)))]
	buf = append(buf[:0], sp...)
	n := 4 + int(h>>40)%60
	for t := 0; t < turn; t++ {
		n += 8 + int(fmix64(h+uint64(t))%40)
	}
	n = min(n, 512-len(sp))
	for i := range n {
		buf = append(buf, fmix64(h^uint64(i+1)*0x9e3779b97f4a7c15))
	}
	return buf
}

// rank builds rank i's forest: the union of its prompts, depth first.
func (g *fleetGen) rank(i int) rankData {
	r := rand.New(rand.NewPCG(uint64(i), 77))
	zipf := rand.NewZipf(r, 1.1, 4, 200000-1)
	salt := fmix64(uint64(i) + 0x1234)
	type node struct {
		bh, eh   uint64
		children []int32
	}
	nodes := []node{{}} // 0: the root
	index := map[[2]uint64]int32{}
	var buf []uint64
	for len(nodes)-1 < benchBlocksPerRank {
		buf = g.prompt(zipf.Uint64(), r.IntN(12), buf)
		cur, path := int32(0), uint64(0)
		for _, bh := range buf {
			path = fmix64(path ^ bh*0x9e3779b97f4a7c15)
			k := [2]uint64{uint64(cur), bh}
			next, ok := index[k]
			if !ok {
				if len(nodes)-1 == benchBlocksPerRank {
					break
				}
				next = int32(len(nodes))
				nodes = append(nodes, node{bh: bh, eh: fmix64(path ^ salt)})
				nodes[cur].children = append(nodes[cur].children, next)
				index[k] = next
			}
			cur = next
		}
	}
	rd := rankData{
		key:    kv.WorkerRank{ID: fmt.Sprintf("worker-%04d", i/4), DPRank: uint32(i % 4)},
		stream: Stream{HasSeq: true, Seq: r.Uint64() >> 20, Epoch: "epoch-1"},
		blocks: make([]Block, 0, benchBlocksPerRank),
	}
	var walk func(id, parent int32)
	walk = func(id, parent int32) {
		for _, c := range nodes[id].children {
			b := Block{EngineHash: nodes[c].eh, BlockHash: nodes[c].bh, Parent: parent, Copies: OneCopy(kv.TierDevice)}
			switch x := nodes[c].eh % 20; {
			case x < 2:
				b.Copies = OneCopy(kv.TierHost)
			case x < 3:
				b.Copies[kv.TierHost] = 1
			}
			rd.blocks = append(rd.blocks, b)
			walk(c, int32(len(rd.blocks)-1))
		}
	}
	walk(0, NoParent)
	return rd
}

// cpuTime is the process's CPU time: the machine is shared, so rates per
// CPU second are reported next to those per wall second.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSnapshotWrite writes the fleet's snapshot to a file.
func BenchmarkSnapshotWrite(b *testing.B) {
	ranks, res := benchFleet(b)
	path := filepath.Join(b.TempDir(), "bench.kvs")
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	var size int64
	var entries int
	for range b.N {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		bw := bufio.NewWriterSize(f, 256<<10)
		w := NewWriter(bw)
		if err := writeRanks(ranks)(w); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		entries = w.dict.entries()
		if err := bw.Flush(); err != nil {
			b.Fatal(err)
		}
		st, _ := f.Stat()
		size = st.Size()
		f.Close()
	}
	b.StopTimer()
	cpu = cpuTime() - cpu
	b.ReportMetric(float64(size)/float64(res), "bytes/residency")
	b.ReportMetric(float64(res)*float64(b.N)/b.Elapsed().Seconds(), "residencies/s")
	b.ReportMetric(float64(res)*float64(b.N)/cpu.Seconds(), "residencies/cpu-s")
	b.ReportMetric(float64(size)/1e6, "MB")
	b.ReportMetric(float64(entries), "dict-entries")
}

// BenchmarkSnapshotLoad reads and verifies the fleet's snapshot from a file
// (in the page cache), keeping nothing.
func BenchmarkSnapshotLoad(b *testing.B) {
	ranks, res := benchFleet(b)
	path := filepath.Join(b.TempDir(), "bench.kvs")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	w := NewWriter(bw)
	if err := writeRanks(ranks)(w); err != nil || w.Close() != nil || bw.Flush() != nil {
		b.Fatal("write", err)
	}
	f.Close()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for range b.N {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		r, err := NewReader(bufio.NewReaderSize(f, 256<<10))
		if err != nil {
			b.Fatal(err)
		}
		var sum uint64
		for r.NextRank() {
			for r.NextBlock() {
				bl := r.Block()
				sum += bl.EngineHash ^ bl.BlockHash
			}
		}
		if r.Err() != nil || r.Counts().Residencies != res {
			b.Fatal(r.Err(), r.Counts())
		}
		f.Close()
	}
	b.StopTimer()
	cpu = cpuTime() - cpu
	b.ReportMetric(float64(res)*float64(b.N)/b.Elapsed().Seconds(), "residencies/s")
	b.ReportMetric(float64(res)*float64(b.N)/cpu.Seconds(), "residencies/cpu-s")
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
