package status

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestDecisionLog drives a DecisionLog from testdata/decision_log:
//
//	new [decisions=N] [candidates=N] [interval=D] [samples=N]
//	add t=D worker=W/R matched=N prompt=N [random=F] [reason=S] [cands=W/R:M,...]
//	recent
//	samples now=D
//
// Times are offsets from the Unix epoch.
func TestDecisionLog(t *testing.T) {
	var l *DecisionLog
	datadriven.RunTest(t, "testdata/decision_log", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "new":
			cfg := LogConfig{Now: func() time.Time { return time.Unix(0, 0) }}
			d.MaybeScanArgs(t, "decisions", &cfg.Decisions)
			d.MaybeScanArgs(t, "candidates", &cfg.Candidates)
			d.MaybeScanArgs(t, "samples", &cfg.Samples)
			if d.HasArg("interval") {
				cfg.Interval = durArg(t, d, "interval")
			}
			l = NewDecisionLog(cfg)
			return ""
		case "add":
			dec := Decision{RandomMatched: -1}
			if d.HasArg("t") {
				dec.Time = time.Unix(0, 0).Add(durArg(t, d, "t"))
			}
			var worker, cands string
			d.ScanArgs(t, "worker", &worker)
			dec.WorkerID, dec.DPRank = workerRank(t, worker)
			var matched, prompt int
			d.ScanArgs(t, "matched", &matched)
			d.ScanArgs(t, "prompt", &prompt)
			dec.Matched, dec.PromptBlocks = uint32(matched), uint32(prompt)
			d.MaybeScanArgs(t, "reason", &dec.Reason)
			if d.HasArg("random") {
				var s string
				d.ScanArgs(t, "random", &s)
				dec.RandomMatched = mustFloat(t, s)
			}
			d.MaybeScanArgs(t, "cands", &cands)
			var cs []Candidate
			for c := range strings.SplitSeq(cands, ",") {
				if c == "" {
					continue
				}
				wr, m, _ := strings.Cut(c, ":")
				id, r := workerRank(t, wr)
				cs = append(cs, Candidate{WorkerID: id, DPRank: r, Matched: uint32(mustFloat(t, m)), Cost: float64(prompt) - mustFloat(t, m)})
			}
			l.Add(&dec, cs)
			return ""
		case "recent":
			var b strings.Builder
			for _, dec := range l.Recent() {
				fmt.Fprintf(&b, "%s %s/%d %d/%d random=%g reason=%q cands=[", dec.Time.Sub(time.Unix(0, 0)), dec.WorkerID, dec.DPRank,
					dec.Matched, dec.PromptBlocks, dec.RandomMatched, dec.Reason)
				for i, c := range dec.Candidates {
					if i > 0 {
						b.WriteByte(' ')
					}
					fmt.Fprintf(&b, "%s/%d:%d", c.WorkerID, c.DPRank, c.Matched)
				}
				fmt.Fprintf(&b, "] omitted=%d\n", dec.OmittedCandidates)
			}
			return b.String()
		case "samples":
			now := time.Unix(0, 0).Add(durArg(t, d, "now"))
			var b strings.Builder
			for _, s := range l.Samples(now) {
				fmt.Fprintf(&b, "%s n=%d hit=%s rr=%s prompt=%d matched=%d random=%g known=%d\n", s.Start.Sub(time.Unix(0, 0)),
					s.Decisions, ratio(s.HitRate), ratio(s.RoundRobin), s.Prompt, s.Matched, s.Random, s.KnownPrompt)
			}
			return b.String()
		default:
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		}
	})
}

func ratio(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 3, 64)
}

func durArg(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	var s string
	d.ScanArgs(t, key, &s)
	v, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return v
}

func workerRank(t *testing.T, s string) (string, uint32) {
	id, r, ok := strings.Cut(s, "/")
	if !ok {
		t.Fatalf("%q: want worker/rank", s)
	}
	return id, uint32(mustFloat(t, r))
}

func mustFloat(t *testing.T, s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

// Add allocates nothing, and a caller's decision and candidates can stay
// on its stack: it is on the route path.
func TestDecisionLogAddAllocs(t *testing.T) {
	l := NewDecisionLog(LogConfig{Decisions: 4, Candidates: 2})
	worker := strings.Repeat("w", 3)
	if n := testing.AllocsPerRun(100, func() {
		var cands [3]Candidate
		for i := range cands {
			cands[i] = Candidate{WorkerID: worker, DPRank: uint32(i)}
		}
		d := Decision{Time: time.Unix(100, 0), WorkerID: worker, Matched: 3, PromptBlocks: 8, RandomMatched: 1}
		l.Add(&d, cands[:])
	}); n != 0 {
		t.Fatalf("Add allocates %v times", n)
	}
	if got := l.Recent()[0]; len(got.Candidates) != 2 || got.OmittedCandidates != 1 {
		t.Fatalf("kept %d candidates, omitted %d; want 2 and 1", len(got.Candidates), got.OmittedCandidates)
	}
}

func BenchmarkDecisionLogAdd(b *testing.B) {
	l := NewDecisionLog(LogConfig{})
	cands := make([]Candidate, 8)
	d := &Decision{Time: time.Unix(100, 0), WorkerID: "w", Matched: 3, PromptBlocks: 8, RandomMatched: 1}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Add(d, cands)
		}
	})
}
