package sweep

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/stats"
	"github.com/kvrouter/kvrouter/bench/trace"
)

func TestScaleLoad(t *testing.T) {
	// 10 requests of 1,000 tokens, one a second: 10 s of trace, 10,000
	// tokens x 1 ms over 2 engines x 10 s = 0.5.
	var reqs []trace.Request
	for i := 0; i < 10; i++ {
		reqs = append(reqs, trace.Request{Arrival: time.Duration(5+i) * time.Second, InputLength: 1000, HashIDs: []uint64{uint64(i), 1}})
	}
	if got := OfferedLoad(reqs, 2, time.Millisecond); math.Abs(got-0.5) > 1e-9 {
		t.Fatalf("offered load %v, want 0.5", got)
	}
	for _, target := range []float64{0.7, 1, 1.3} {
		out, f := ScaleLoad(reqs, 2, time.Millisecond, target)
		if got := OfferedLoad(out, 2, time.Millisecond); math.Abs(got-target) > 1e-6 {
			t.Errorf("target %v: got %v", target, got)
		}
		if math.Abs(f-0.5/target) > 1e-9 || out[0].Arrival != 0 || reqs[0].Arrival != 5*time.Second {
			t.Errorf("target %v: factor %v, first arrival %v, input changed %v", target, f, out[0].Arrival, reqs[0].Arrival)
		}
	}
}

func TestGenerateShapes(t *testing.T) {
	for _, s := range []string{"chat", "agent", "rag", "mix"} {
		tr, err := Generate(s, "poisson", 1, time.Minute, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Reqs) == 0 || tr.Reqs[0].BlockTokens != 512 {
			t.Fatalf("%s: %d requests", s, len(tr.Reqs))
		}
		for i, r := range tr.Reqs {
			if len(r.HashIDs) != (r.InputLength+511)/512 || (i > 0 && r.Arrival < tr.Reqs[i-1].Arrival) {
				t.Fatalf("%s request %d: %+v", s, i, r)
			}
		}
	}
}

func TestReportRendersEveryCell(t *testing.T) {
	rep := &Report{Engines: 2, Policies: Policies, Baseline: Baseline, Cells: []Cell{
		{Trace: "a", Capacity: 4096, Load: 0.7, PooledCeiling: 0.5, Results: []Result{{TTFTP50Ratio: 0.5, TTFTP99Ratio: 0.4}, {TTFTP50Ratio: 1, TTFTP99Ratio: 1}}},
	}}
	rep.Cells[0].Results[0].Policy, rep.Cells[0].Results[1].Policy = Policies[0].Name, Baseline
	var b strings.Builder
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| a | 4096 | 70% | 50.0% |") || !strings.Contains(b.String(), "0.50x / 0.40x") {
		t.Fatalf("table:\n%s", b.String())
	}
	svg := rep.SVG()
	if !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "a/4096/70%") || !strings.HasSuffix(svg, "</svg>\n") {
		t.Fatalf("svg:\n%s", svg)
	}
}

// TestReportFloorColumn: on the vLLM model each row gives the TTFT floor.
func TestReportFloorColumn(t *testing.T) {
	results := func() []Result {
		r := []Result{{}, {}}
		r[0].Policy, r[1].Policy = Policies[0].Name, Baseline
		return r
	}
	fl := stats.Summary{P50: 20 * time.Millisecond, P99: 175 * time.Millisecond}
	rep := &Report{Engines: 2, Policies: Policies, Baseline: Baseline, EngineModel: engine.ModelVLLM.String(), Cells: []Cell{
		{Trace: "a", Capacity: 4096, Load: 1, PooledCeiling: 0.5, TTFTFloor: &fl, Results: results()},
		{Trace: "b", Capacity: 4096, Load: 1, PooledCeiling: 0.5, Results: results()},
	}}
	var b strings.Builder
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| ceiling | TTFT floor p50 / p99 s |", "| a | 4096 | 100% | 50.0% | 0.020 / 0.175 |", "| b | 4096 | 100% | 50.0% | - |"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestVLLMTokenCost: a vLLM engine's cost per prompt token includes its
// share of decode steps, larger when the KV blocks limit the batch.
func TestVLLMTokenCost(t *testing.T) {
	reqs := []trace.Request{{InputLength: 12000, OutputLength: 340}, {InputLength: 12070, OutputLength: 346}}
	small := VLLMTokenCost(reqs, 4096, engine.SchedConfig{})
	large := VLLMTokenCost(reqs, 65536, engine.SchedConfig{})
	prefill := engine.Llama31H100.PerPrefillToken
	if small <= large || large <= prefill {
		t.Fatalf("cost per token: %v at 4,096 blocks, %v at 65,536, prefill alone %v", small, large, prefill)
	}
	// At 4,096 blocks about 5 requests fit: each decode step is shared by 5.
	p, o := 12035.0, 343.0
	b := 4096 * 16 / (p + o/2)
	m := engine.Llama31H100
	step := m.Base.Seconds() + b*(m.PerDecodeSeq.Seconds()+(p+o/2)*m.PerKVTokenNs*1e-9)
	want := (p*m.PerPrefillToken.Seconds() + o*step/b) / p
	if d := small.Seconds()/want - 1; d > 1e-3 || d < -1e-3 {
		t.Fatalf("cost %v, want %.3gs", small, want)
	}
	// the prefill share of the cost is the prefill term alone
	share := VLLMPrefillShare(reqs, 4096, engine.SchedConfig{})
	if d := share*small.Seconds()/prefill.Seconds() - 1; d > 1e-3 || d < -1e-3 || share >= VLLMPrefillShare(reqs, 65536, engine.SchedConfig{}) {
		t.Fatalf("prefill share %v of %v, want %v of it", share, small, prefill)
	}
	if VLLMTokenCost(nil, 4096, engine.SchedConfig{}) != 0 || VLLMPrefillShare(nil, 4096, engine.SchedConfig{}) != 0 {
		t.Fatal("empty trace has a cost")
	}
}
