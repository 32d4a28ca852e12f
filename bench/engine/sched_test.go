package engine

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestSchedulerScripts runs the vLLM V1 scheduler model through
// testdata/sched/*.txt (regenerate the expectations with -rewrite). Commands:
//
//	init blocks=N [block-size=B] [budget=T] [max-seqs=S]
//	                        a fresh scheduler; the step model is 1ms + 10us per
//	                        prefill token + 100us per decoding request + 1ns per KV token
//	add id=I len=L [out=O] [prefix=J:K]
//	                        queue request I: L prompt tokens, O output tokens (default
//	                        1); with prefix, its first K tokens are request J's
//	step [n=N]              run N steps (default 1), printing each
//	pool                    the free queue (next evicted first) and the cached blocks
//
// Block hashes print as I.k: block k of the request that first cached it.
func TestSchedulerScripts(t *testing.T) {
	scripts, err := filepath.Glob("testdata/sched/*.txt")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts in testdata/sched: %v", err)
	}
	for _, path := range scripts {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			var f *schedFixture
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				if d.Cmd != "init" && f == nil {
					d.Fatalf(t, "%s before init", d.Cmd)
				}
				switch d.Cmd {
				case "init":
					f = newSchedFixture(t, d)
					return ""
				case "add":
					return f.add(t, d)
				case "step":
					n := 1
					if d.HasArg("n") {
						d.ScanArgs(t, "n", &n)
					}
					var b strings.Builder
					for i := 0; i < n; i++ {
						f.step(&b)
					}
					return b.String()
				case "pool":
					return f.pool()
				}
				d.Fatalf(t, "unknown command %s", d.Cmd)
				return ""
			})
		})
	}
}

type schedFixture struct {
	s      *Scheduler
	tokens map[uint64][]uint32
	label  map[uint64]string
	now    time.Duration
	steps  int
}

func newSchedFixture(t *testing.T, d *datadriven.TestData) *schedFixture {
	cfg := SchedConfig{
		BlockSize: 4,
		Step:      StepModel{Base: time.Millisecond, PerPrefillToken: 10 * time.Microsecond, PerDecodeSeq: 100 * time.Microsecond, PerKVTokenNs: 1},
	}
	d.ScanArgs(t, "blocks", &cfg.NumBlocks)
	if d.HasArg("block-size") {
		d.ScanArgs(t, "block-size", &cfg.BlockSize)
	}
	if d.HasArg("budget") {
		d.ScanArgs(t, "budget", &cfg.MaxNumBatchedTokens)
	}
	if d.HasArg("max-seqs") {
		d.ScanArgs(t, "max-seqs", &cfg.MaxNumSeqs)
	}
	s, err := NewScheduler(cfg)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return &schedFixture{s: s, tokens: map[uint64][]uint32{}, label: map[uint64]string{}}
}

func (f *schedFixture) add(t *testing.T, d *datadriven.TestData) string {
	var id uint64
	var n, out int
	d.ScanArgs(t, "id", &id)
	d.ScanArgs(t, "len", &n)
	if d.HasArg("out") {
		d.ScanArgs(t, "out", &out)
	}
	toks := make([]uint32, n)
	for i := range toks {
		toks[i] = uint32(id*1000 + uint64(i))
	}
	if d.HasArg("prefix") {
		var spec string
		d.ScanArgs(t, "prefix", &spec)
		j, k, ok := strings.Cut(spec, ":")
		src, err1 := strconv.ParseUint(j, 10, 64)
		cnt, err2 := strconv.Atoi(k)
		if !ok || err1 != nil || err2 != nil || len(f.tokens[src]) < cnt || cnt > n {
			d.Fatalf(t, "bad prefix %q", spec)
		}
		copy(toks, f.tokens[src][:cnt])
	}
	if err := f.s.Add(id, toks, out); err != nil {
		if errors.Is(err, ErrTooLong) {
			return "rejected: too long"
		}
		return err.Error()
	}
	f.tokens[id] = toks
	for k, h := range ChainHashes(f.s.cfg.HashSeed, f.s.cfg.BlockSize, toks, nil) {
		if _, ok := f.label[h]; !ok {
			f.label[h] = fmt.Sprintf("%d.%d", id, k)
		}
	}
	return ""
}

func (f *schedFixture) names(hs []uint64) string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = f.label[h]
	}
	return strings.Join(out, " ")
}

func ids(xs []uint64) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(out, " ")
}

func (f *schedFixture) step(b *strings.Builder) {
	r := f.s.Step()
	f.steps++
	if r.Duration == 0 {
		fmt.Fprintf(b, "step %d: idle\n", f.steps)
		return
	}
	f.now += r.Duration
	fmt.Fprintf(b, "step %d: %v (prefill %d, decode %d, kv %d) ends %v\n", f.steps, r.Duration, r.PrefillTokens, r.DecodeSeqs, r.KVTokens, f.now)
	var batch []string
	for _, e := range r.Batch {
		batch = append(batch, fmt.Sprintf("%d+%d", e.ID, e.Tokens))
	}
	fmt.Fprintf(b, "  batch: %s\n", strings.Join(batch, " "))
	for _, ev := range r.Events {
		switch ev.Kind {
		case Stored:
			parent := "-"
			if ev.HasParent {
				parent = f.label[ev.Parent]
			}
			fmt.Fprintf(b, "  BlockStored %s (parent %s, %d tokens)\n", f.names(ev.Hashes), parent, len(ev.Tokens))
		case Removed:
			fmt.Fprintf(b, "  BlockRemoved %s\n", f.names(ev.Hashes))
		}
	}
	for _, l := range []struct {
		name string
		ids  []uint64
	}{{"first token", r.FirstToken}, {"finished", r.Finished}, {"preempted", r.Preempted}} {
		if len(l.ids) > 0 {
			fmt.Fprintf(b, "  %s: %s\n", l.name, ids(l.ids))
		}
	}
	fmt.Fprintf(b, "  waiting %s | running %s | free %d\n", f.queue(f.s.waiting), f.queue(f.s.running), f.s.pool.NumFree())
}

func (f *schedFixture) queue(q []*seq) string {
	out := make([]string, len(q))
	for i, r := range q {
		out[i] = strconv.FormatUint(r.id, 10)
	}
	return "[" + strings.Join(out, " ") + "]"
}

func (f *schedFixture) pool() string {
	p := f.s.pool
	var free []string
	for _, b := range p.FreeOrder() {
		if h, ok := p.Hash(b); ok {
			free = append(free, f.label[h])
		} else {
			free = append(free, "_")
		}
	}
	var cached []string
	for h := range p.cached {
		cached = append(cached, f.label[h])
	}
	slices.Sort(cached)
	st := f.s.Stats()
	return fmt.Sprintf("free (evicted first): %s\ncached: %s\nstats: admitted %d, prompt blocks %d, hits %d, stored %d, evicted %d, preemptions %d\n",
		strings.Join(free, " "), strings.Join(cached, " "), st.Admitted, st.PromptBlocks, st.HitBlocks, st.Stored, st.Evicted, st.Preemptions)
}
