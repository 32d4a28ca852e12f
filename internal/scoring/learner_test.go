package scoring

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestTimeCostScripts runs PolicyTime through testdata/timecost/*.txt
// (regenerate the expectations with -rewrite). Commands:
//
//	init [prior=TOKENS/S] [predict] [balance=C] [rank-rates]
//	                                   a fresh router with PolicyTime (prediction off unless
//	                                   predict; the bounded-load guard's factor C, off without;
//	                                   per-rank rates with rank-rates)
//	worker id=W                        register worker W (model m, one rank)
//	store id=W base=B tokens=N blocks=K
//	                                   W's index holds the first K blocks of the prompt (B, N)
//	route req=R base=B tokens=N        Route the prompt of N tokens B, B+1, ...; prints the
//	                                   choice and every candidate's cost in milliseconds
//	advance d=DURATION                 the clock moves on
//	done req=R | finish req=R          MarkPrefillDone / MarkFinished
//	learned                            the learner's state: the fleet's rates, then per rank
//	context                            every rank's guard load (decayed routed blocks)
func TestTimeCostScripts(t *testing.T) {
	scripts, err := filepath.Glob("testdata/timecost/*.txt")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts in testdata/timecost: %v", err)
	}
	for _, path := range scripts {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			var f *fixture
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				if d.Cmd != "init" && f == nil {
					d.Fatalf(t, "%s before init", d.Cmd)
				}
				switch d.Cmd {
				case "init":
					prior := 10000.0
					if d.HasArg("prior") {
						d.ScanArgs(t, "prior", &prior)
					}
					predict := d.HasArg("predict")
					balance := 0.0 // (off unless asked for: the scripts test the cost)
					if d.HasArg("balance") {
						d.ScanArgs(t, "balance", &balance)
					}
					rankRates := d.HasArg("rank-rates")
					f = newFixture(t, func(c *Config) {
						c.Policy, c.PrefillTokensPerSecond, c.DisablePrediction = PolicyTime, prior, !predict
						c.RankRates = rankRates
						c.BalanceFactor, c.DisableBalance = balance, balance == 0
					})
					return "ok"
				case "worker":
					var id string
					d.ScanArgs(t, "id", &id)
					f.addWorker(id, "m", 1)
					return "ok"
				case "store":
					var id string
					var base, n, k int
					d.ScanArgs(t, "id", &id)
					d.ScanArgs(t, "base", &base)
					d.ScanArgs(t, "tokens", &n)
					d.ScanArgs(t, "blocks", &k)
					f.store(id, 0, tokens(uint32(base), n), k, kv.TierDevice)
					return "ok"
				case "route":
					var req string
					var base, n int
					d.ScanArgs(t, "req", &req)
					d.ScanArgs(t, "base", &base)
					d.ScanArgs(t, "tokens", &n)
					dec, err := f.r.Route(&Prompt{Model: "m", Tokens: tokens(uint32(base), n)}, req, 0, 0)
					if err != nil {
						return "error: " + err.Error()
					}
					return describeDecision(dec)
				case "advance":
					var s string
					d.ScanArgs(t, "d", &s)
					dur, err := time.ParseDuration(s)
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					f.clock.advance(dur)
					return "ok"
				case "done", "finish":
					var req string
					d.ScanArgs(t, "req", &req)
					mark := f.r.MarkPrefillDone
					if d.Cmd == "finish" {
						mark = f.r.MarkFinished
					}
					if err := mark(req); err != nil {
						return "error: " + err.Error()
					}
					return "ok"
				case "learned":
					return describeLearned(f.r)
				case "context":
					return describeContext(f.r)
				}
				d.Fatalf(t, "unknown command %s", d.Cmd)
				return ""
			})
		})
	}
}

func describeDecision(dec *Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-> %s (matched %d of %d)\n", dec.WorkerID, dec.Matched, dec.PromptBlocks)
	cands := append([]Candidate(nil), dec.Candidates...)
	sort.Slice(cands, func(i, j int) bool { return cands[i].WorkerID < cands[j].WorkerID })
	for _, c := range cands {
		fmt.Fprintf(&b, "%s: matched %d, cost %.4g ms\n", c.WorkerID, c.Matched, 1000*c.Cost)
	}
	return b.String()
}

// describeContext lists the guard loads of model m's workers (guardLoads),
// by worker id.
func describeContext(r *Router) string {
	loads, _ := guardLoads(r, "m")
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(loads)) {
		fmt.Fprintf(&b, "%s: %.4g blocks\n", id, loads[id])
	}
	return b.String()
}

func describeLearned(r *Router) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	defer r.lockModels()()
	var b strings.Builder
	f := r.fleetFor("m")
	e := ratesOf(f, 1/r.cfg.PrefillTokensPerSecond)
	samples := f.stats.n
	fmt.Fprintf(&b, "fleet: %.4g tokens/s, %.3g s/token per decode block, queue %.3g, reuse %.3g, samples %.3g\n",
		1/e.intercept, e.slope, e.queue, e.reuse, samples)
	for _, rk := range r.models["m"] {
		rt := &rk.timing
		fmt.Fprintf(&b, "%s: %.4g tokens/s, pending %d (%d tokens), samples %.3g\n",
			rk.key.ID, 1/e.secondsPerToken(rt, 0), rt.pending, rk.prefillTokens, rt.stats.n*rankDecay(e.seq, rt.seq, e.ranks))
	}
	return b.String()
}

// The slope on decode load is found when the timings carry one and is 0
// when they are noise or point the wrong way.
func TestTimeStatsSlope(t *testing.T) {
	const spt, perBlock = 1e-4, 1e-6 // 10,000 tokens/s, 1% slower per 100 decode blocks... per block
	for _, tc := range []struct {
		name  string
		busy  func(i int, x float64) float64
		want  float64
		exact bool
	}{
		{"linear", func(_ int, x float64) float64 { return 1000 * (spt + perBlock*x) }, perBlock, true},
		{"flat", func(_ int, x float64) float64 { return 1000 * spt }, 0, true},
		{"decreasing", func(_ int, x float64) float64 { return 1000 * (spt - perBlock*x/1000) }, 0, true},
		// Alternating noise of +-20% uncorrelated with x.
		{"noise", func(i int, x float64) float64 { return 1000 * spt * (1 + 0.2*float64(1-2*(i%2))) }, 0, true},
	} {
		var s timeStats
		for i := 0; i < 64; i++ {
			x := float64((i * 37) % 50) // decode blocks 0..49
			s.add(1, 1000, tc.busy(i, x), x)
		}
		got := s.slope()
		if math.Abs(got-tc.want) > 1e-3*max(tc.want, 1e-9) {
			t.Errorf("%s: slope %g, want %g", tc.name, got, tc.want)
		}
	}
	var few timeStats
	few.add(1, 1000, 1, 0)
	few.add(1, 1000, 2, 10)
	if got := few.slope(); got != 0 {
		t.Errorf("two samples: slope %g, want 0 until 8", got)
	}
}

// Under PolicyTime the busy thresholds still exclude a rank, temperature
// still samples, and predictions still credit a burst's shared prefix.
func TestTimePolicyKeepsThresholdsSamplingPredictions(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Policy, c.MaxActivePrefillTokens = PolicyTime, 8*bs })
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	toks := tokens(1, 8*bs)
	d, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	first := d.WorkerID
	// The prediction makes the same prompt free on first (no queue counted
	// against it: it is all cached), and the first rank is now at its
	// threshold of 8 blocks of active prefill: the next request goes to the
	// other one even so.
	d, err = f.r.Route(&Prompt{Model: "m", Tokens: toks}, "r2", 0, 0)
	if err != nil || d.WorkerID == first || len(d.Candidates) != 1 {
		t.Fatalf("r2 -> %+v, %v; want the other worker, the only candidate under the threshold", d, err)
	}
	// Both are at the threshold now.
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: toks}, "r3", 0, 0); !errors.Is(err, ErrResourceExhausted) {
		t.Fatalf("r3: %v; want ErrResourceExhausted", err)
	}
	for _, id := range []string{"r1", "r2"} {
		if err := f.r.MarkFinished(id); err != nil {
			t.Fatal(err)
		}
	}
	// Temperature: a holds half of a new prompt, so it is cheaper; at
	// temperature 0 it always wins, at a high temperature b is chosen too.
	p := tokens(5000, 8*bs)
	f.store("a", 0, p, 4, kv.TierDevice)
	for _, temp := range []float64{0, 10} {
		seen := map[string]bool{}
		for i := 0; i < 64; i++ {
			d, err := f.r.Route(&Prompt{Model: "m", Tokens: p}, "", temp, 0)
			if err != nil {
				t.Fatal(err)
			}
			seen[d.WorkerID] = true
		}
		if want := temp > 0; seen["b"] != want || !seen["a"] {
			t.Fatalf("temperature %v chose %v; want a, and b only above 0", temp, seen)
		}
	}
	// Predictions: r1's and r2's prompt is predicted cached on both.
	d, err = f.r.Route(&Prompt{Model: "m", Tokens: toks}, "", 0, 0)
	if err != nil || d.Matched != 8 || d.Cost != 0 {
		t.Fatalf("predicted prompt -> %+v, %v; want all 8 blocks matched at cost 0", d, err)
	}
	if err := f.r.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// A rank that slow timings made look slow gets no traffic, so no timings
// of its own: its estimate must still drift back to the fleet's as the
// others' timings come in.
func TestAvoidedRankForgetsAnOutlier(t *testing.T) {
	// (The guard off: it would move a's prompts to b, as it should.)
	f := newFixture(t, func(c *Config) {
		c.Policy, c.DisablePrediction, c.DisableBalance, c.RankRates = PolicyTime, true, true, true
	})
	f.addWorker("a", "m", 1)
	f.addWorker("b", "m", 1)
	pa, pb := tokens(1, 16*bs), tokens(100_000, 16*bs)
	f.store("a", 0, pa, 15, kv.TierDevice)
	f.store("b", 0, pb, 15, kv.TierDevice)
	rate := func(id string) float64 {
		for _, l := range f.r.Loads() {
			if l.WorkerID == id {
				return l.PrefillTokensPerSecond
			}
		}
		t.Fatalf("no load for %s", id)
		return 0
	}
	serve := func(id string, p []uint32, d time.Duration) {
		t.Helper()
		dec, err := f.r.Route(&Prompt{Model: "m", Tokens: p}, "req", 0, 0)
		if err != nil || dec.WorkerID != id {
			t.Fatalf("route -> %+v, %v; want %s", dec, err, id)
		}
		f.clock.advance(d)
		if err := f.r.MarkPrefillDone("req"); err != nil {
			t.Fatal(err)
		}
		if err := f.r.MarkFinished("req"); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		serve("a", pa, time.Second) // 16 tokens in a second (clipped to 4x the estimate each time)
	}
	for range 10 {
		serve("b", pb, 8*time.Millisecond) // 2,000 tokens/s
	}
	if ra, rb := rate("a"), rate("b"); ra > 0.7*rb {
		t.Fatalf("after the outlier a is at %.0f tokens/s, b %.0f; want a well below", ra, rb)
	}
	for range 400 {
		serve("b", pb, 8*time.Millisecond) // 2,000 tokens/s
	}
	if ra, rb := rate("a"), rate("b"); ra < 0.8*rb || rb < 1800 || rb > 2200 {
		t.Fatalf("after 400 timings of b: a %.0f tokens/s, b %.0f; want b near 2,000 and a back near b", ra, rb)
	}
}

// TestSecondsPerTokenMemo checks timeCoster's memo against secondsPerToken
// itself: after each step (a Route, a sample, a decode load change, a new
// rank count) a rank's memo that a Route would use (its generation and
// decode load the current ones) holds the value secondsPerToken returns
// then, a Route that changed nothing leaves every rank's memo current, and
// a sample changes the values.
func TestSecondsPerTokenMemo(t *testing.T) {
	// (No predictions: q1 then has uncached tokens to learn from.)
	f := newFixture(t, func(c *Config) { c.Policy, c.DisablePrediction = PolicyTime, true })
	f.addWorker("a", "m", 2)
	p := &Prompt{Model: "m", Tokens: tokens(1, 64)}
	check := func(step string, wantCurrent bool) []float64 {
		t.Helper()
		f.r.mu.RLock()
		defer f.r.mu.RUnlock()
		defer f.r.lockModels()()
		gen := f.r.states["m"].gen
		e := ratesOf(f.r.fleetFor("m"), f.r.load.priorSPT)
		var out []float64
		for _, rk := range f.r.models["m"] {
			decode := float64(rk.decodeBlocks)
			want := e.secondsPerToken(&rk.timing, decode)
			m := rk.timing.spt
			current := m.gen == gen && m.decode == decode
			switch {
			case current && math.Float64bits(m.value) != math.Float64bits(want):
				t.Fatalf("%s: rank %d: memo %v (generation %d), secondsPerToken %v", step, rk.key.DPRank, m.value, m.gen, want)
			case wantCurrent && !current:
				t.Fatalf("%s: rank %d: memo of generation %d decode %v, not the current %d %v", step, rk.key.DPRank, m.gen, m.decode, gen, decode)
			}
			out = append(out, want)
		}
		return out
	}
	route := func(id string) {
		t.Helper()
		if _, err := f.r.Route(p, id, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	route("")
	check("after the first Route", false)
	route("")
	before := check("after a Route that changed nothing", true)
	route("q1")
	check("after a Route with a request", false)
	f.clock.advance(50 * time.Millisecond)
	if err := f.r.MarkPrefillDone("q1"); err != nil {
		t.Fatal(err)
	}
	after := check("after a sample", false)
	if fmt.Sprint(before) == fmt.Sprint(after) {
		t.Fatalf("a sample of 50ms for 64 tokens left every rank's seconds per token at %v", after)
	}
	route("")
	check("after a Route past the sample", true)
	// A second sample: a rank with samples now decays by a distance of
	// at least 1, so its value depends on the fleet's rank count.
	route("q2")
	f.clock.advance(30 * time.Millisecond)
	if err := f.r.MarkPrefillDone("q2"); err != nil {
		t.Fatal(err)
	}
	route("")
	check("after a Route past the second sample", true)
	f.addWorker("b", "m", 1)
	route("")
	check("after a new rank", false)
	route("")
	check("after a Route past the new rank", true)
}

// TestBatchedPrefillsKeepTheModelRate is the reason the default costs every
// rank at its model's rate. Two identical ranks prefill at the same speed,
// but b batches: its prefills are routed together and finish together, so
// the first sample takes the whole interval and the others none, while a's
// prefills come one at a time and each takes a whole interval. Learned per
// rank (RankRates), b looks several times faster than a, which would send
// it more; by default both get the model's rate.
func TestBatchedPrefillsKeepTheModelRate(t *testing.T) {
	for _, rankRates := range []bool{false, true} {
		f := newFixture(t, func(c *Config) {
			c.Policy, c.DisablePrediction, c.DisableBalance, c.RankRates = PolicyTime, true, true, rankRates
		})
		f.addWorker("a", "m", 1)
		f.addWorker("b", "m", 1)
		pa, pb := tokens(1, 16*bs), tokens(100_000, 16*bs)
		f.store("a", 0, pa, 15, kv.TierDevice)
		f.store("b", 0, pb, 15, kv.TierDevice)
		route := func(want string, p []uint32, id string) {
			t.Helper()
			if dec, err := f.r.Route(&Prompt{Model: "m", Tokens: p}, id, 0, 0); err != nil || dec.WorkerID != want {
				t.Fatalf("route %s -> %+v, %v; want %s", id, dec, err, want)
			}
		}
		done := func(ids ...string) {
			t.Helper()
			for _, id := range ids {
				if err := f.r.MarkPrefillDone(id); err != nil {
					t.Fatal(err)
				}
				if err := f.r.MarkFinished(id); err != nil {
					t.Fatal(err)
				}
			}
		}
		for range 50 {
			route("a", pa, "a1")
			f.clock.advance(20 * time.Millisecond) // (one step: its fixed time over one block)
			done("a1")
			ids := []string{"b1", "b2", "b3", "b4"}
			for _, id := range ids {
				route("b", pb, id)
			}
			f.clock.advance(20 * time.Millisecond) // (one step of the same length, four blocks)
			done(ids...)
		}
		ra, rb := rankRate(t, f, "a"), rankRate(t, f, "b")
		t.Logf("rank rates %v: a %.0f tokens/s, b %.0f", rankRates, ra, rb)
		if rankRates && rb < 2*ra {
			t.Errorf("rank rates: a %.0f tokens/s, b %.0f; want b's batches to look at least twice as fast", ra, rb)
		}
		if !rankRates && ra != rb {
			t.Errorf("model rate: a %.0f tokens/s, b %.0f; want both the model's", ra, rb)
		}
	}
}

// rankRate is worker id's prefill tokens per second as Loads reports it.
func rankRate(t *testing.T, f *fixture, id string) float64 {
	t.Helper()
	for _, l := range f.r.Loads() {
		if l.WorkerID == id {
			return l.PrefillTokensPerSecond
		}
	}
	t.Fatalf("no load for %s", id)
	return 0
}
