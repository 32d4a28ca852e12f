package scoring

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestReplay drives a Router through a generated sequence of Route,
// MarkPrefillDone, MarkFinished, index stores and clock steps, and prints
// every answer: the chosen worker and rank, its matched blocks, its cost to
// the bit, and the guard's diversion. The expected output was recorded from
// the Router before its state was split per model, so a change in any
// decision (a different choice, a cost off by one ulp, a different draw of
// the sampler) fails here. The last line counts the decisions by reason.
//
//	replay seed=<n> models=<n> workers=<n> dp=<n> ops=<n> [policy=time|blocks]
//	       [temperature=<f>] [busy-prefill=<tokens>] [balance=<c>] [approximate]
//	       [rank-rates]
//
// The time policy's scenarios recorded before Config.RankRates existed
// learned per-rank rates; they carry rank-rates so their decisions are
// still checked against that recording.
func TestReplay(t *testing.T) {
	datadriven.RunTest(t, "testdata/replay/replay", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "replay" {
			t.Fatalf("unknown command %q", d.Cmd)
		}
		var sc replayScenario
		d.ScanArgs(t, "seed", &sc.seed)
		d.ScanArgs(t, "models", &sc.models)
		d.ScanArgs(t, "workers", &sc.workers)
		d.ScanArgs(t, "dp", &sc.dp)
		d.ScanArgs(t, "ops", &sc.ops)
		sc.policy = "time"
		d.MaybeScanArgs(t, "policy", &sc.policy)
		d.MaybeScanArgs(t, "temperature", &sc.temperature)
		d.MaybeScanArgs(t, "busy-prefill", &sc.busyPrefill)
		d.MaybeScanArgs(t, "balance", &sc.balance)
		sc.approximate = d.HasArg("approximate")
		sc.rankRates = d.HasArg("rank-rates")
		return sc.run(t)
	})
}

type replayScenario struct {
	seed, models, workers, dp, ops int
	policy                         string
	temperature, balance           float64
	busyPrefill                    int
	approximate, rankRates         bool
}

func (sc *replayScenario) run(t *testing.T) string {
	f := newFixture(t, func(c *Config) {
		c.Policy = Policy(sc.policy)
		c.MaxActivePrefillTokens = int64(sc.busyPrefill)
		c.RankRates = sc.rankRates
		if sc.balance > 0 {
			c.BalanceFactor = sc.balance
		}
	})
	rng := rand.New(rand.NewPCG(uint64(sc.seed), 99))
	model := func(m int) string { return fmt.Sprintf("m%d", m) }
	for m := range sc.models {
		for w := range sc.workers {
			id := fmt.Sprintf("%s-w%d", model(m), w)
			approx := sc.approximate && w == 0
			if err := f.r.AddWorker(Worker{ID: id, Model: model(m), Endpoint: id, DPSize: sc.dp, Approximate: approx}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Conversations: a shared system prefix per model, then per-conversation
	// turns that grow.
	type conv struct {
		model string
		toks  []uint32
	}
	convs := make([]conv, 4*sc.models)
	for i := range convs {
		m := i % sc.models
		c := conv{model: model(m), toks: tokens(uint32(1000*(m+1)), 4*bs)}
		c.toks = append(c.toks, tokens(uint32(100000*(i+1)), 2*bs+rng.IntN(3*bs))...)
		convs[i] = c
	}
	var b strings.Builder
	var active []string
	reasons := map[string]int{}
	next := 0
	for op := range sc.ops {
		switch x := rng.IntN(100); {
		case x < 55: // Route
			c := &convs[rng.IntN(len(convs))]
			c.toks = append(c.toks, tokens(uint32(rng.IntN(1<<20)), rng.IntN(2*bs))...)
			id := fmt.Sprintf("r%d", next)
			next++
			dec, err := f.r.Route(&Prompt{Model: c.model, Tokens: c.toks}, id, sc.temperature, 0)
			if err != nil {
				fmt.Fprintf(&b, "%d route %s %s: %s\n", op, id, c.model, errClass(err))
				continue
			}
			active = append(active, id)
			reasons[dec.Reason]++
			fmt.Fprintf(&b, "%d route %s -> %s/%d matched=%d/%d cost=%v", op, id, dec.WorkerID, dec.DPRank, dec.Matched, dec.PromptBlocks, dec.Cost)
			if dec.Diverted {
				fmt.Fprintf(&b, " diverted=%d", dec.DivertedBlocks)
			}
			b.WriteString("\n")
		case x < 75 && len(active) > 0: // MarkPrefillDone
			id := active[rng.IntN(len(active))]
			if err := f.r.MarkPrefillDone(id); err != nil {
				fmt.Fprintf(&b, "%d prefill-done %s: %s\n", op, id, errClass(err))
			}
		case x < 90 && len(active) > 0: // MarkFinished
			i := rng.IntN(len(active))
			id := active[i]
			active = append(active[:i], active[i+1:]...)
			if err := f.r.MarkFinished(id); err != nil {
				fmt.Fprintf(&b, "%d finish %s: %s\n", op, id, errClass(err))
			}
		case x < 96: // an engine stores a conversation's prefix
			c := &convs[rng.IntN(len(convs))]
			var m, w int
			fmt.Sscanf(c.model, "m%d", &m)
			w = rng.IntN(sc.workers)
			rank := uint32(rng.IntN(sc.dp))
			n := 1 + rng.IntN(len(c.toks)/bs)
			f.store(fmt.Sprintf("%s-w%d", c.model, w), rank, c.toks, n, kv.Tier(rng.IntN(int(kv.NumTiers))))
		default:
			f.clock.advance(time.Duration(rng.IntN(400)) * time.Millisecond)
		}
		f.clock.advance(time.Duration(rng.IntN(20)) * time.Millisecond)
	}
	fmt.Fprintf(&b, "active %d\n", f.r.ActiveRequests())
	b.WriteString("reasons")
	for _, r := range Reasons {
		fmt.Fprintf(&b, " %s=%d", r, reasons[r])
	}
	b.WriteString("\n")
	return b.String()
}

func errClass(err error) string {
	for _, c := range []error{ErrInvalidArgument, ErrNotFound, ErrUnavailable, ErrAlreadyExists, ErrResourceExhausted} {
		if errors.Is(err, c) {
			return c.Error()
		}
	}
	return "error: " + err.Error()
}
