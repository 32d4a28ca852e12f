package ingest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/shamaton/msgpack/v2"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// The ingest benchmark: 16 publishers, each one engine with its own worker,
// over loopback TCP into one index. The publishers run in a child process
// (this test binary re-executed as TestBenchPublisherProcess) so that the
// router's CPU time, measured with getrusage(RUSAGE_SELF), is the router's
// alone. A baseline applies the same payloads to the same sinks directly,
// without ZeroMQ, in the same run.
//
// One op is a round of benchRounds batches from each publisher; every batch
// stores one 64-block sequence (4 BlockStored events of 16 blocks, each
// continuing the previous) and, after a warm-up window, removes the sequence
// stored benchWindow batches earlier, so the index stays bounded.

const (
	benchPubs        = 16
	benchRounds      = 256 // batches per publisher per op
	benchEvents      = 4   // BlockStored events per batch
	benchBlocksPerEv = 16
	benchBatchBlocks = benchEvents * benchBlocksPerEv
	benchWindow      = 64 // sequences kept per worker
	benchCycle       = 2 * benchWindow
)

// benchPayloads returns publisher p's payloads: benchWindow batches with
// stores only, then benchCycle batches with stores and removes to repeat.
func benchPayloads(p int) (warm, cycle [][]byte) {
	rng := rand.New(rand.NewPCG(uint64(p), 77))
	hashes := make([][]uint64, benchCycle) // per sequence slot
	tokens := make([][]uint32, benchCycle)
	for s := range hashes {
		hashes[s] = make([]uint64, benchBatchBlocks)
		for i := range hashes[s] {
			hashes[s][i] = rng.Uint64()
		}
		tokens[s] = make([]uint32, benchBatchBlocks*testBlockSize)
		for i := range tokens[s] {
			tokens[s][i] = rng.Uint32N(150000)
		}
	}
	encode := func(slot int, removeSlot int) []byte {
		evs := make([]any, 0, benchEvents+1)
		for e := 0; e < benchEvents; e++ {
			var parent any
			if e > 0 {
				parent = hashes[slot][e*benchBlocksPerEv-1]
			}
			evs = append(evs, []any{"BlockStored",
				hashes[slot][e*benchBlocksPerEv : (e+1)*benchBlocksPerEv], parent,
				tokens[slot][e*benchBlocksPerEv*testBlockSize : (e+1)*benchBlocksPerEv*testBlockSize],
				testBlockSize, nil, "GPU"})
		}
		if removeSlot >= 0 {
			evs = append(evs, []any{"BlockRemoved", hashes[removeSlot], "GPU"})
		}
		b, err := msgpack.Marshal([]any{1.7e9, evs, 0})
		if err != nil {
			panic(err)
		}
		return b
	}
	for s := 0; s < benchWindow; s++ {
		warm = append(warm, encode(s, -1))
	}
	for j := benchWindow; j < benchWindow+benchCycle; j++ {
		cycle = append(cycle, encode(j%benchCycle, (j-benchWindow)%benchCycle))
	}
	return warm, cycle
}

// benchPayload returns the payload of publisher's batch number n (0-based).
func benchPayload(warm, cycle [][]byte, n int) []byte {
	if n < benchWindow {
		return warm[n]
	}
	return cycle[(n-benchWindow)%benchCycle]
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(b *testing.B, blocks int, wall, cpu time.Duration) {
	b.ReportMetric(float64(blocks)/wall.Seconds(), "blocks/s")
	b.ReportMetric(cpu.Seconds()/(float64(blocks)/1e6), "cpu-s/Mblocks")
	b.ReportMetric(0, "ns/op") // an op is a whole round; the two above are the figures
}

func BenchmarkIngest(b *testing.B) {
	b.Run("direct", benchDirect)
	b.Run("zmq", benchZMQ)
}

// benchDirect is the baseline: the same payloads decoded and applied by one
// goroutine per worker, as the rank appliers do, with no transport.
func benchDirect(b *testing.B) {
	idx := radix.New(radix.Config{})
	type pub struct {
		warm, cycle [][]byte
		s           *indexSink
	}
	pubs := make([]pub, benchPubs)
	for p := range pubs {
		pubs[p].warm, pubs[p].cycle = benchPayloads(p)
		pubs[p].s = newIndexSink(idx, kv.WorkerRank{ID: fmt.Sprintf("w%02d", p)}, testBlockSize, 0, nil)
	}
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	var wg sync.WaitGroup
	for p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st batchStats
			for n := 0; n < b.N*benchRounds; n++ {
				st.reset()
				if err := pubs[p].s.apply(benchPayload(pubs[p].warm, pubs[p].cycle, n), &st); err != nil {
					panic(err)
				}
				if st.blocksStored != benchBatchBlocks {
					panic(fmt.Sprintf("batch %d stored %d blocks: %+v", n, st.blocksStored, st))
				}
			}
		}()
	}
	wg.Wait()
	wall, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	report(b, b.N*benchRounds*benchPubs*benchBatchBlocks, wall, cpu)
}

// benchZMQ runs the publishers in a child process and the Manager here.
func benchZMQ(b *testing.B) {
	in, ports := startBenchPublishers(b)
	idx := radix.New(radix.Config{})
	m, err := New(Config{Index: idx, BlockSize: testBlockSize, QueueDepth: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ids := make([]string, benchPubs)
	for p, port := range ports {
		ids[p] = fmt.Sprintf("w%02d", p)
		if err := m.Add(Worker{ID: ids[p], KVEndpoint: ">tcp://127.0.0.1:" + port}); err != nil {
			b.Fatal(err)
		}
	}
	eventually(b, "all publishers connected", func() bool {
		for _, id := range ids {
			if !m.Status(id)[0].Connected {
				return false
			}
		}
		return true
	})
	total := b.N * benchRounds
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	fmt.Fprintf(in, "%d\n", total)
	lastSeq := uint64(total - 1)
	for _, id := range ids {
		for {
			st := m.Status(id)[0]
			if st.LastSeq >= lastSeq && st.EventsApplied > 0 {
				break
			}
			time.Sleep(200 * time.Microsecond) // polling the status, not synchronization
		}
	}
	wall, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	checkBenchWorkers(b, m, ids, total)
	report(b, total*benchPubs*benchBatchBlocks, wall, cpu)
}

// startBenchPublishers starts the publisher process (stopped when the
// benchmark ends) and returns its stdin, where the number of batches to send
// starts a run, and its publishers' ports.
func startBenchPublishers(b *testing.B) (io.Writer, []string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchPublisherProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "KVROUTER_BENCH_PUBLISHER=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	out := bufio.NewScanner(outPipe)
	for out.Scan() {
		if l := out.Text(); strings.HasPrefix(l, "pub ") {
			ports := strings.Fields(strings.TrimPrefix(l, "pub "))
			if len(ports) != benchPubs {
				b.Fatalf("publisher ports %q", ports)
			}
			return in, ports
		}
	}
	b.Fatalf("publisher process: %v", out.Err())
	return nil, nil
}

// checkBenchWorkers checks that every worker applied all total batches, in
// order, and holds the last window's blocks.
func checkBenchWorkers(b *testing.B, m *Manager, ids []string, total int) {
	for _, id := range ids {
		st := m.Status(id)[0]
		if st.Gaps != 0 || st.DecodeErrors != 0 || st.EngineRestarts != 0 {
			b.Fatalf("%s: %+v", id, st)
		}
		want := uint64(min(total, benchWindow) * benchBatchBlocks)
		if st.CachedBlocks != want {
			b.Fatalf("%s caches %d blocks, want %d", id, st.CachedBlocks, want)
		}
		if st.EventsApplied != uint64(total*benchEvents+max(0, total-benchWindow)) {
			b.Fatalf("%s applied %d events", id, st.EventsApplied)
		}
	}
}

// TestBenchPublisherProcess is the benchmark's publisher process. Run
// directly (without KVROUTER_BENCH_PUBLISHER), it only checks that the
// payloads it would send decode to what the benchmark expects.
func TestBenchPublisherProcess(t *testing.T) {
	if os.Getenv("KVROUTER_BENCH_PUBLISHER") != "1" {
		warm, cycle := benchPayloads(0)
		ix := radix.New(radix.Config{})
		s := newIndexSink(ix, kv.WorkerRank{ID: "w"}, testBlockSize, 0, nil)
		var st batchStats
		for n := 0; n < benchWindow+benchCycle+3; n++ {
			st.reset()
			if err := s.apply(benchPayload(warm, cycle, n), &st); err != nil {
				t.Fatal(err)
			}
			if st.blocksStored != benchBatchBlocks || st.applyErrors != [numApplyErrors]uint32{} {
				t.Fatalf("batch %d: %+v", n, st)
			}
		}
		if got := s.cached(); got != benchWindow*benchBatchBlocks {
			t.Fatalf("cached %d", got)
		}
		if err := ix.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := runBenchPublishers(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench publisher:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runBenchPublishers listens on benchPubs loopback ports, accepts one
// subscriber on each, reads the number of batches from in, and sends them
// as fast as TCP takes them. It writes ZMTP frames itself after zmq4's
// handshake, several messages per write as libzmq does.
func runBenchPublishers(in io.Reader, out io.Writer) error {
	lns := make([]net.Listener, benchPubs)
	var ports []string
	for p := range lns {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		lns[p] = l
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	fmt.Fprintf(out, "pub %s\n", strings.Join(ports, " "))
	conns := make([]net.Conn, benchPubs)
	for p, l := range lns {
		nc, err := l.Accept()
		if err != nil {
			return err
		}
		if _, err := openZMTP(nc, zmq4.Pub, true); err != nil {
			return err
		}
		go io.Copy(io.Discard, nc) // the subscription, then nothing
		conns[p] = nc
	}
	var total int
	if _, err := fmt.Fscan(in, &total); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, benchPubs)
	for p, nc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			warm, cycle := benchPayloads(p)
			buf := make([]byte, 0, 256<<10)
			for n := 0; n < total; n++ {
				buf = appendZMTPMessage(buf, uint64(n), benchPayload(warm, cycle, n))
				if len(buf) > 192<<10 || n == total-1 {
					if _, err := nc.Write(buf); err != nil {
						errs <- err
						return
					}
					buf = buf[:0]
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	io.Copy(io.Discard, in) // stay up until the benchmark is done
	return nil
}

// appendZMTPMessage appends one [empty topic, seq, payload] message in ZMTP
// 3.0 framing.
func appendZMTPMessage(buf []byte, seq uint64, payload []byte) []byte {
	const more, long = 0x01, 0x02
	buf = append(buf, more, 0) // empty topic
	buf = append(buf, more, 8) // seq
	buf = binary.BigEndian.AppendUint64(buf, seq)
	if len(payload) > 255 {
		buf = append(buf, long)
		buf = binary.BigEndian.AppendUint64(buf, uint64(len(payload)))
	} else {
		buf = append(buf, 0, byte(len(payload)))
	}
	return append(buf, payload...)
}
