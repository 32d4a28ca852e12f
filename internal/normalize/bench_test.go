package normalize

import (
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// benchWorkload is a realistic mix of payloads: batches of 1-32 events, each
// store of 1-32 blocks of 16 tokens (token ids up to 150k), in vLLM 0.26 map
// form, vLLM 12-field arrays and SGLang arrays with signed hashes; about one
// event in ten is a BlockRemoved.
type benchWorkload struct {
	payloads [][]byte
	events   int
	blocks   int // blocks in BlockStored events
}

func newBenchWorkload(nPayloads int) *benchWorkload {
	rng := rand.New(rand.NewPCG(1, 2))
	w := &benchWorkload{}
	var parent uint64
	hasParent := false
	for range nPayloads {
		form := benchForm(rng.IntN(3))
		nev := 1 + rng.IntN(32)
		p := arrHeader(3, false)
		p = append(p, encFloat64(1.7e9+rng.Float64())...)
		p = append(p, arrHeader(nev, false)...)
		for range nev {
			w.events++
			if rng.IntN(10) == 0 {
				p = appendBenchRemove(p, form, rng.Uint64())
				continue
			}
			nb := 1 + rng.IntN(32)
			w.blocks += nb
			hashes := make([]uint64, nb)
			for i := range hashes {
				hashes[i] = rng.Uint64()
			}
			p = appendBenchStore(p, rng, form, hashes, parent, hasParent)
			parent, hasParent = hashes[nb-1], rng.IntN(4) != 0
		}
		p = append(p, 0)
		w.payloads = append(w.payloads, p)
	}
	return w
}

// benchForm is the encoding of one benchmark payload's events.
type benchForm int

const (
	benchVLLMArray benchForm = iota // 12-field tagged arrays
	benchVLLMMap                    // vLLM 0.26 tagged maps
	benchSGLang                     // 7-field tagged arrays, signed hashes
)

func appendBenchRemove(p []byte, form benchForm, h uint64) []byte {
	if form == benchVLLMMap {
		p = append(p, 0x84)
		p = append(p, encStr([]byte("type"), false)...)
		p = append(p, encStr([]byte("BlockRemoved"), false)...)
		p = append(p, encStr([]byte("block_hashes"), false)...)
		p = append(p, 0x91)
		p = append(p, encUint(h)...)
		p = append(p, encStr([]byte("medium"), false)...)
		p = append(p, encStr([]byte("GPU"), false)...)
		p = append(p, encStr([]byte("group_idx"), false)...)
		return append(p, 0)
	}
	p = append(p, 0x93)
	p = append(p, encStr([]byte("BlockRemoved"), false)...)
	p = append(p, 0x91)
	p = append(p, encUint(h)...)
	return append(p, encStr([]byte("GPU"), false)...)
}

// appendBenchStore appends a BlockStored of 16-token blocks with random
// token ids up to 150k.
func appendBenchStore(p []byte, rng *rand.Rand, form benchForm, hashes []uint64, parent uint64, hasParent bool) []byte {
	encHash := func(h uint64) []byte {
		if form == benchSGLang {
			return encInt(int64(h))
		}
		return encUint(h)
	}
	var fields [][]byte
	var names []string
	add := func(name string, v []byte) {
		names = append(names, name)
		fields = append(fields, v)
	}
	nb := len(hashes)
	hs := arrHeader(nb, false)
	for _, h := range hashes {
		hs = append(hs, encHash(h)...)
	}
	add("block_hashes", hs)
	if hasParent {
		add("parent_block_hash", encHash(parent))
	} else {
		add("parent_block_hash", []byte{0xc0})
	}
	toks := arrHeader(nb*16, false)
	for range nb * 16 {
		toks = append(toks, encInt(int64(rng.IntN(150000)))...)
	}
	add("token_ids", toks)
	add("block_size", encInt(16))
	add("lora_id", []byte{0xc0})
	add("medium", encStr([]byte("GPU"), false))
	add("lora_name", []byte{0xc0})
	if form != benchSGLang {
		ek := arrHeader(nb, false)
		for range nb {
			ek = append(ek, 0xc0)
		}
		add("extra_keys", ek)
		add("group_idx", encInt(0))
		add("kv_cache_spec_kind", encStr([]byte("full_attention"), false))
		add("kv_cache_spec_sliding_window", []byte{0xc0})
		add("locality", encStr([]byte("LOCAL"), false))
	}
	if form == benchVLLMMap {
		p = append(p, 0x80|byte(len(fields)+1))
		p = append(p, encStr([]byte("type"), false)...)
		p = append(p, encStr([]byte("BlockStored"), false)...)
		for i, f := range fields {
			p = append(p, encStr([]byte(names[i]), false)...)
			p = append(p, f...)
		}
		return p
	}
	p = append(p, 0x90|byte(len(fields)+1))
	p = append(p, encStr([]byte("BlockStored"), false)...)
	for _, f := range fields {
		p = append(p, f...)
	}
	return p
}

// BenchmarkNormalize measures decode+normalize of the mix: hand is the
// zero-copy reader (the production path), shamaton decodes with
// github.com/shamaton/msgpack/v2 into interface{} trees (the baseline). One
// op is one pass over all payloads; see blocks/s and allocs/event.
func BenchmarkNormalize(b *testing.B) {
	w := newBenchWorkload(256)
	run := func(b *testing.B, decode func([]byte, *rawBatch) error) {
		n := New(Config{})
		var batch Batch
		var rb rawBatch
		pass := func() {
			for _, p := range w.payloads {
				if decode == nil {
					if err := n.Normalize(p, &batch); err != nil {
						b.Fatal(err)
					}
					continue
				}
				batch.reset()
				if err := decode(p, &rb); err != nil {
					b.Fatal(err)
				}
				n.apply(&rb, &batch)
			}
		}
		pass() // warm the reused memory
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		b.ResetTimer()
		cpu0 := cpuTime()
		start := time.Now()
		for b.Loop() {
			pass()
		}
		el := time.Since(start)
		cpu := cpuTime() - cpu0
		b.StopTimer()
		runtime.ReadMemStats(&ms1)
		passes := float64(b.N)
		b.ReportMetric(float64(w.blocks)*passes/el.Seconds(), "blocks/s")
		// The machine is shared: blocks per second of this process's CPU
		// time (all threads, GC included) is the per-core figure.
		b.ReportMetric(float64(w.blocks)*passes/cpu.Seconds(), "blocks/cpu-s")
		b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/(float64(w.events)*passes), "allocs/event")
		b.ReportMetric(float64(w.events), "events/op")
	}
	b.Run("hand", func(b *testing.B) { run(b, nil) })
	b.Run("shamaton", func(b *testing.B) { run(b, decodeBatchShamaton) })
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecode measures the decode step alone.
func BenchmarkDecode(b *testing.B) {
	w := newBenchWorkload(256)
	for _, c := range []struct {
		name string
		fn   func([]byte, *rawBatch) error
	}{{"hand", decodeBatch}, {"shamaton", decodeBatchShamaton}} {
		b.Run(c.name, func(b *testing.B) {
			var rb rawBatch
			start := time.Now()
			for b.Loop() {
				for _, p := range w.payloads {
					if err := c.fn(p, &rb); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(w.blocks)*float64(b.N)/time.Since(start).Seconds(), "blocks/s")
		})
	}
}

// BenchmarkBlockHash measures one 16-token router block hash.
func BenchmarkBlockHash(b *testing.B) {
	toks := make([]uint32, 16)
	for i := range toks {
		toks[i] = uint32(i * 7919)
	}
	seed := Seed("", "")
	b.ReportAllocs()
	for b.Loop() {
		BlockHash(seed, toks, nil)
	}
}
