package demo

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/sweep"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		d    []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(5, 1, 4, 2, 3), 0.5, 3 * time.Millisecond},
		{ms(5, 1, 4, 2, 3), 0.99, 5 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
	} {
		if got := percentile(tc.d, tc.p); got != tc.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tc.d, tc.p, got, tc.want)
		}
	}
}

func TestComparisonLine(t *testing.T) {
	kv := sideStats{Name: "kvrouter", Requests: 1063, HitRate: 0.732, P50: 251 * time.Millisecond, P99: 1690 * time.Millisecond, N: 1063}
	rr := sideStats{Name: "round-robin", Requests: 1062, HitRate: 0.5, P50: 502 * time.Millisecond, P99: 3380 * time.Millisecond, N: 1062}
	for _, tc := range []struct {
		name   string
		kv, rr sideStats
		want   string
	}{
		{"both measured", kv, rr,
			"kvrouter: 73.2% cache hits, TTFT 251ms / 1.69s  |  round-robin: 50.0% cache hits, TTFT 502ms / 3.38s  |  kvrouter's TTFT 0.50x / 0.50x round-robin's  (1063 / 1062 requests)"},
		{"baseline not yet measured", kv, sideStats{Name: "round-robin"},
			"kvrouter: 73.2% cache hits, TTFT 251ms / 1.69s  |  round-robin:  0.0% cache hits, TTFT not yet measured  (1063 / 0 requests)"},
	} {
		if got := comparisonLine(tc.kv, tc.rr); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// TestSideTTFTWindow: a side keeps only the most recent ttftWindow times.
func TestSideTTFTWindow(t *testing.T) {
	s := &side{}
	for i := 0; i < ttftWindow+10; i++ {
		s.addTTFT(time.Duration(i))
	}
	if len(s.ttft) != ttftWindow {
		t.Fatalf("kept %d, want %d", len(s.ttft), ttftWindow)
	}
	for _, d := range s.ttft {
		if d < 10 {
			t.Fatalf("kept %v, one of the 10 oldest", d)
		}
	}
}

func TestDemoChatLoad(t *testing.T) {
	reqs, err := Chat(4, 300*time.Microsecond, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) < 100 {
		t.Fatalf("%d requests, want a trace of hundreds", len(reqs))
	}
	if l := sweep.OfferedLoad(reqs, 4, 300*time.Microsecond); l < 0.79 || l > 0.81 {
		t.Fatalf("offered load %v, want 0.8", l)
	}
	if _, err := Chat(4, 300*time.Microsecond, 0); err == nil {
		t.Fatal("load 0 accepted")
	}
}
