package replay

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRequestRecords: with Records, a vLLM-model replay keeps one record
// per request: its engine, a first step no earlier than its arrival and
// before its first token (whose distance from the arrival is its TTFT), and
// the tokens it prefilled: the whole prompt for an engine's first request,
// less the shared leading block for a later one that found it cached.
func TestRequestRecords(t *testing.T) {
	fleet := vllmFleet(t, 3, 2000)
	reqs := burstyTrace()
	pr, err := Play(context.Background(), PlayConfig{Fleet: fleet, Requests: reqs, Clock: Clock{T0: time.Now(), SpeedUp: 100000},
		Choose: RoundRobin(3), Records: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Records) != len(reqs) {
		t.Fatalf("%d records for %d requests", len(pr.Records), len(reqs))
	}
	seen := make([]bool, len(reqs))
	var ttft []time.Duration
	firstOn := map[int]RequestRecord{}
	hit := 0
	for _, r := range pr.Records {
		if r.Seq < 0 || r.Seq >= len(reqs) || seen[r.Seq] {
			t.Fatalf("record %+v: seq out of range or repeated", r)
		}
		seen[r.Seq] = true
		if r.Engine < 0 || r.Engine >= 3 || r.Arrival != reqs[r.Seq].Arrival || r.Scheduled < r.Arrival || r.First <= r.Scheduled {
			t.Fatalf("record %+v: engine, arrival or times out of order", r)
		}
		if r.PromptTokens != 1500 || r.Prefilled < 1 || r.Prefilled > r.PromptTokens {
			t.Fatalf("record %+v: prompt or prefilled tokens", r)
		}
		if f, ok := firstOn[r.Engine]; !ok || r.Arrival < f.Arrival {
			firstOn[r.Engine] = r
		}
		if r.Prefilled <= 1500-512 {
			hit++
		}
		ttft = append(ttft, r.First-r.Arrival)
	}
	for e, r := range firstOn {
		if r.Prefilled != 1500 {
			t.Errorf("engine %d's first request prefilled %d of 1500 tokens", e, r.Prefilled)
		}
	}
	if hit == 0 {
		t.Error("no request found the shared leading block cached")
	}
	slices.Sort(ttft)
	slices.Sort(pr.TTFT)
	if !slices.Equal(ttft, pr.TTFT) {
		t.Fatalf("records' TTFTs %v, the replay's %v", ttft, pr.TTFT)
	}

	path := filepath.Join(t.TempDir(), "requests.jsonl")
	if err := writeRecords(path, pr.Records); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var back []RequestRecord
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var r RequestRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		back = append(back, r)
	}
	if !slices.Equal(back, pr.Records) {
		t.Fatalf("read back %d records, differing from the %d written", len(back), len(pr.Records))
	}
}

// TestVariantFileName: each variant's files (router logs, request records)
// have a name of their own: no spaces, and a round past the first apart
// from the first.
func TestVariantFileName(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range []variant{{policy: PolicyKV}, {policy: PolicyKV, round: 1}, {policy: PolicyKV, replicas: 2, sync: true}, {policy: PolicyRoundRobin}} {
		n := v.fileName()
		if seen[n] || strings.ContainsAny(n, " /") {
			t.Fatalf("%+v: file name %q repeated or not a plain name", v, n)
		}
		seen[n] = true
	}
}
