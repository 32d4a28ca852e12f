package radix

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// The benchmark workload: a fleet of workers, one rank each, each with a KV
// cache of a fixed number of blocks kept full by LRU eviction, serving
// requests routed at random (so popular prefixes end up on many workers).
// A request is a conversation turn: one of a few system prompts (skewed
// popularity) followed by the conversation's own blocks up to that turn; the
// conversations' popularity is skewed too. Block size 16 tokens, prompts up to
// 512 blocks (8192 tokens). Everything derives from fixed seeds, so the event
// stream is the same in every run.

type wlConfig struct {
	workers  int // KVROUTER_BENCH_WORKERS, default 1000
	capacity int // blocks per worker, KVROUTER_BENCH_CAPACITY, default 16384
	sys      int // system prompts, KVROUTER_BENCH_SYS, default 32
	convs    int // conversations
	maxLen   int // blocks per prompt
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func benchConfig() wlConfig {
	return wlConfig{
		workers:  envInt("KVROUTER_BENCH_WORKERS", 1000),
		capacity: envInt("KVROUTER_BENCH_CAPACITY", 16384),
		sys:      envInt("KVROUTER_BENCH_SYS", 32),
		convs:    200000,
		maxLen:   512,
	}
}

// workload holds the shared prompt universe and every worker's cache state.
type workload struct {
	cfg     wlConfig
	sys     [][]uint64 // system prompts' block hashes
	workers []*wlWorker
}

type wlWorker struct {
	w    kv.WorkerRank
	idx  int32
	salt uint64
	r    *rand.Rand
	conv *rand.Zipf
	lru  lru
	reqs int
	ehs  []uint64
}

func newWorkload(cfg wlConfig) *workload {
	r := rand.New(rand.NewPCG(1, 2))
	wl := &workload{cfg: cfg}
	for i := range cfg.sys {
		n := 8 + r.IntN(57) // 8..64 blocks (128..1024 tokens)
		p := make([]uint64, n)
		for j := range p {
			p[j] = r.Uint64()
		}
		_ = i
		wl.sys = append(wl.sys, p)
	}
	for i := range cfg.workers {
		wr := rand.New(rand.NewPCG(uint64(i), 77))
		wl.workers = append(wl.workers, &wlWorker{
			w:    kv.WorkerRank{ID: fmt.Sprintf("worker-%04d", i)},
			idx:  int32(i),
			salt: kv.Mix(uint64(i) + 0x1234),
			r:    wr,
			conv: rand.NewZipf(wr, 1.1, 4, uint64(cfg.convs-1)),
			lru:  newLRU(cfg.capacity + cfg.maxLen),
		})
	}
	return wl
}

// prompt returns the block hashes of a turn of conversation c into buf.
func (wl *workload) prompt(c uint64, turn int, buf []uint64) []uint64 {
	h := kv.Mix(c + 0xc0ffee)
	// System prompt popularity is skewed too: conversation hashes map onto
	// system prompts through a square, favouring low indexes.
	f := float64(h>>11) / (1 << 53)
	sp := wl.sys[int(f*f*float64(len(wl.sys)))]
	buf = append(buf[:0], sp...)
	n := 4 + int(h>>40)%60 // first user message
	for t := 0; t < turn; t++ {
		n += 8 + int(kv.Mix(h+uint64(t))%40) // each turn adds a reply and a message
	}
	if turn < 0 { // as long as a prompt can be
		n = wl.cfg.maxLen
	}
	n = min(n, wl.cfg.maxLen-len(sp))
	for i := range n {
		buf = append(buf, kv.Mix(h^uint64(i+1)*0x9e3779b97f4a7c15))
	}
	return buf
}

// wlEvent is one store run or remove batch for a worker.
type wlEvent struct {
	w         int32
	remove    bool
	hasParent bool
	parent    uint64
	blocks    []kv.Block
	hashes    []uint64
}

// log is a sequence of events with their blocks in shared arenas.
type wlLog struct {
	ev     []wlEvent
	blocks int // block events: blocks stored plus hashes removed
}

// engineHash chains block hash bh onto path (the prompt so far) and returns
// the new path and the engine hash ww gives that prefix's block.
func (ww *wlWorker) engineHash(path, bh uint64) (uint64, uint64) {
	path = kv.Mix(path ^ bh*0x9e3779b97f4a7c15)
	return path, kv.Mix(path ^ ww.salt)
}

// request simulates one request on worker ww: the cached prefix blocks are
// touched, the missing ones stored (one run per contiguous gap, under the
// block before it) and the least recently used blocks evicted to capacity.
func (wl *workload) request(ww *wlWorker, log *wlLog, buf []uint64) []uint64 {
	c := ww.conv.Uint64()
	turn := ww.r.IntN(12)
	buf = wl.prompt(c, turn, buf)
	var path uint64
	var prev uint64
	var run []kv.Block
	flush := func(parent uint64, hasParent bool) {
		if len(run) > 0 {
			log.ev = append(log.ev, wlEvent{w: ww.idx, hasParent: hasParent, parent: parent, blocks: run})
			log.blocks += len(run)
			run = nil
		}
	}
	var runParent uint64
	runHasParent := false
	for i, bh := range buf {
		var eh uint64
		path, eh = ww.engineHash(path, bh)
		if ww.lru.touch(eh) {
			flush(runParent, runHasParent)
		} else {
			if len(run) == 0 {
				runParent, runHasParent = prev, i > 0
			}
			run = append(run, kv.Block{EngineHash: eh, BlockHash: bh})
			ww.lru.add(eh)
		}
		prev = eh
		ww.ehs = append(ww.ehs, eh)
	}
	flush(runParent, runHasParent)
	// Like vLLM, which frees a finished request's blocks tail first, leave the
	// prompt's first block the most recently used and its last the least.
	for i := len(ww.ehs) - 1; i >= 0; i-- {
		ww.lru.touch(ww.ehs[i])
	}
	ww.ehs = ww.ehs[:0]
	if over := ww.lru.size - wl.cfg.capacity; over > 0 {
		hs := make([]uint64, 0, over)
		for range over {
			hs = append(hs, ww.lru.evict())
		}
		log.ev = append(log.ev, wlEvent{w: ww.idx, remove: true, hashes: hs})
		log.blocks += len(hs)
	}
	ww.reqs++
	return buf
}

// warm runs requests on ww until its cache is full.
func (wl *workload) warm(ww *wlWorker, log *wlLog) {
	var buf []uint64
	for ww.lru.size < wl.cfg.capacity {
		buf = wl.request(ww, log, buf)
	}
}

// churn generates at least n block events, round robin over the workers w
// with w % stride == part.
func (wl *workload) churn(n, part, stride int) *wlLog {
	log := &wlLog{}
	var buf []uint64
	for log.blocks < n {
		for i := part; i < len(wl.workers) && log.blocks < n; i += stride {
			buf = wl.request(wl.workers[i], log, buf)
		}
	}
	return log
}

// lru is a compact LRU set of engine hashes: a map to slots of a doubly
// linked list held in arrays.
type lru struct {
	pos              map[uint64]int32
	key              []uint64
	prev, next       []int32
	head, tail, free int32 // head is most recent
	size             int
}

func newLRU(n int) lru {
	l := lru{pos: make(map[uint64]int32, n), key: make([]uint64, n), prev: make([]int32, n), next: make([]int32, n), head: -1, tail: -1}
	for i := range n {
		l.next[i] = int32(i + 1)
	}
	l.next[n-1] = -1
	return l
}

func (l *lru) unlink(i int32) {
	if l.prev[i] >= 0 {
		l.next[l.prev[i]] = l.next[i]
	} else {
		l.head = l.next[i]
	}
	if l.next[i] >= 0 {
		l.prev[l.next[i]] = l.prev[i]
	} else {
		l.tail = l.prev[i]
	}
}

func (l *lru) pushFront(i int32) {
	l.prev[i], l.next[i] = -1, l.head
	if l.head >= 0 {
		l.prev[l.head] = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
	}
}

func (l *lru) touch(k uint64) bool {
	i, ok := l.pos[k]
	if ok {
		l.unlink(i)
		l.pushFront(i)
	}
	return ok
}

func (l *lru) add(k uint64) {
	i := l.free
	l.free = l.next[i]
	l.key[i] = k
	l.pos[k] = i
	l.pushFront(i)
	l.size++
}

func (l *lru) evict() uint64 {
	i := l.tail
	l.unlink(i)
	k := l.key[i]
	delete(l.pos, k)
	l.next[i] = l.free
	l.free = i
	l.size--
	return k
}

// applyLog applies log to ix and returns the number of errors.
func applyLog(ix *Index, wl *workload, log *wlLog) int {
	errs := 0
	for i := range log.ev {
		e := &log.ev[i]
		w := wl.workers[e.w].w
		var err error
		if e.remove {
			err = ix.Remove(w, e.hashes, kv.TierDevice)
		} else {
			err = ix.Store(w, e.parent, e.hasParent, kv.TierDevice, e.blocks)
		}
		if err != nil {
			errs++
		}
	}
	return errs
}
