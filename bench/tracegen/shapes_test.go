package tracegen

import (
	"math"
	"slices"
	"sort"
	"testing"
	"time"
)

type sessionKey struct {
	shape   string
	session int
}

// bySession groups requests by session, in order.
func bySession(reqs []Request) map[sessionKey][]Request {
	out := map[sessionKey][]Request{}
	for _, r := range reqs {
		k := sessionKey{r.Shape, r.Session}
		out[k] = append(out[k], r)
	}
	return out
}

// checkGrowing asserts that each step of a session extends the previous:
// its ids start with every full block of the previous step, and its prompt
// holds the previous prompt, the previous answer and at least one new token.
// It returns the number of consecutive pairs checked.
func checkGrowing(t *testing.T, reqs []Request, bt int, gen time.Duration) int {
	t.Helper()
	pairs := 0
	for k, steps := range bySession(reqs) {
		for i := 1; i < len(steps); i++ {
			prev, cur := steps[i-1], steps[i]
			if cur.Step != prev.Step+1 {
				t.Fatalf("%v: step %d follows step %d", k, cur.Step, prev.Step)
			}
			full := prev.InputLength / bt
			if !slices.Equal(cur.HashIDs[:full], prev.HashIDs[:full]) {
				t.Fatalf("%v step %d: ids %v do not start with step %d's full blocks %v", k, cur.Step, cur.HashIDs, prev.Step, prev.HashIDs[:full])
			}
			if cur.InputLength < prev.InputLength+prev.OutputLength+1 {
				t.Fatalf("%v step %d: %d tokens after %d + answer %d", k, cur.Step, cur.InputLength, prev.InputLength, prev.OutputLength)
			}
			if gap := cur.At - prev.At; gap < float64(prev.OutputLength)*gen.Seconds() {
				t.Fatalf("%v step %d: %.2f s after a %d-token answer", k, cur.Step, gap, prev.OutputLength)
			}
			pairs++
		}
	}
	return pairs
}

// checkPartialBlocks asserts that a partial last block's id is never used
// for any other block: only prompts with the same tokens up to it repeat it.
func checkPartialBlocks(t *testing.T, reqs []Request, bt int) {
	t.Helper()
	partial := map[uint64]int{} // id -> input length of the prompt it ends
	for _, r := range reqs {
		if r.InputLength%bt != 0 {
			partial[r.HashIDs[len(r.HashIDs)-1]] = r.InputLength
		}
	}
	for _, r := range reqs {
		for i, id := range r.HashIDs {
			n, ok := partial[id]
			if ok && (i != len(r.HashIDs)-1 || r.InputLength != n) {
				t.Fatalf("partial block %d of a %d-token prompt reused at block %d of a %d-token prompt", id, n, i, r.InputLength)
			}
		}
	}
}

// systemSharing asserts that requests with the same system prompt share its
// full blocks and requests with different ones share no leading block.
func systemSharing(t *testing.T, reqs []Request, bt int, sysLen int) {
	t.Helper()
	full := sysLen / bt
	first := map[int][]uint64{}
	for _, r := range reqs {
		head := r.HashIDs[:full]
		if f, ok := first[r.System]; !ok {
			first[r.System] = head
		} else if !slices.Equal(f, head) {
			t.Fatalf("%s system prompt %d: blocks %v, earlier %v", r.Shape, r.System, head, f)
		}
	}
	if len(first) < 2 {
		t.Fatalf("only %d system prompts used", len(first))
	}
	for a, ha := range first {
		for b, hb := range first {
			if a != b && ha[0] == hb[0] {
				t.Fatalf("system prompts %d and %d share block 0", a, b)
			}
		}
	}
}

func TestChat(t *testing.T) {
	c := testConfig(ShapeChat, Poisson, 10*time.Minute)
	c.Chat.SystemLen = Const(1300) // 2 full blocks and a partial
	reqs := generate(t, c)
	if pairs := checkGrowing(t, reqs, c.BlockTokens, c.GenPerToken); pairs < len(reqs)/2 {
		t.Fatalf("only %d of %d requests continue a conversation", pairs, len(reqs))
	}
	checkPartialBlocks(t, reqs, c.BlockTokens)
	systemSharing(t, reqs, c.BlockTokens, 1300)
	// Think time: turns of a conversation are seconds apart, not back to back.
	var gaps []float64
	for _, steps := range bySession(reqs) {
		for i := 1; i < len(steps); i++ {
			gaps = append(gaps, steps[i].At-steps[i-1].At)
		}
	}
	sort.Float64s(gaps)
	if med := gaps[len(gaps)/2]; med < 10 {
		t.Errorf("median gap between turns %.1f s, want think time (mean 40 s)", med)
	}
	// System prompt popularity is Zipf-like: rank 0 most used, rank 7 least.
	n := make([]int, c.Chat.SystemPrompts)
	for _, r := range reqs {
		if r.Step == 0 {
			n[r.System]++
		}
	}
	if n[0] <= n[1] || n[0] < 3*n[7] {
		t.Errorf("new conversations per system prompt %v: not Zipf-like", n)
	}
}

func TestAgent(t *testing.T) {
	c := testConfig(ShapeAgent, Bursty, 10*time.Minute)
	c.Agent.SystemLen = Const(3000)
	reqs := generate(t, c)
	pairs := checkGrowing(t, reqs, c.BlockTokens, c.GenPerToken)
	if pairs < len(reqs)*3/4 {
		t.Fatalf("only %d of %d requests continue a loop", pairs, len(reqs))
	}
	checkPartialBlocks(t, reqs, c.BlockTokens)
	systemSharing(t, reqs, c.BlockTokens, 3000)
	// Many steps, short outputs, long and growing contexts.
	var out, in float64
	longest := 0
	for _, steps := range bySession(reqs) {
		longest = max(longest, len(steps))
	}
	for _, r := range reqs {
		out += float64(r.OutputLength)
		in += float64(r.InputLength)
	}
	if out /= float64(len(reqs)); out > 150 {
		t.Errorf("mean output %.0f tokens, want short tool calls", out)
	}
	if in /= float64(len(reqs)); in < 6000 {
		t.Errorf("mean prompt %.0f tokens, want a growing context", in)
	}
	if longest < 20 {
		t.Errorf("longest loop %d steps, want many", longest)
	}
	// The context limit ends loops, not prompts mid-way.
	c.MaxContext = 8000
	for _, r := range generate(t, c) {
		if r.InputLength > 8000 {
			t.Fatalf("prompt of %d tokens over the 8000 limit", r.InputLength)
		}
	}
}

func TestRAG(t *testing.T) {
	const (
		sysLen = 700  // block 0 system, block 1 = system tail + document start
		docLen = 1024 // the first document ends inside block 3
		s      = 1.0
	)
	c := testConfig(ShapeRAG, Poisson, 30*time.Minute)
	c.RAG.SystemPrompts, c.RAG.SystemLen, c.RAG.DocLen, c.RAG.Zipf = 1, Const(sysLen), Const(docLen), s
	reqs := generate(t, c)
	shared := (sysLen + docLen) / c.BlockTokens // full blocks holding only system + first document
	byDoc := map[int][]uint64{}
	for _, r := range reqs {
		if len(r.Docs) != c.RAG.K {
			t.Fatalf("%d documents, want %d", len(r.Docs), c.RAG.K)
		}
		d := slices.Clone(r.Docs)
		slices.Sort(d)
		if len(slices.Compact(d)) != c.RAG.K {
			t.Fatalf("repeated document in %v", r.Docs)
		}
		head := r.HashIDs[:shared]
		if h, ok := byDoc[r.Docs[0]]; !ok {
			byDoc[r.Docs[0]] = head
		} else if !slices.Equal(h, head) {
			t.Fatalf("first document %d: blocks %v, earlier %v", r.Docs[0], head, h)
		}
	}
	checkPartialBlocks(t, reqs, c.BlockTokens)
	// From the trace alone: block 1 (system tail + first document) recurs
	// with Zipf frequencies. Rank the ids at block 1 by count and fit the
	// log-log slope over the top 10: about -s.
	count := map[uint64]int{}
	for _, r := range reqs {
		count[r.HashIDs[1]]++
	}
	var freq []float64
	for _, n := range count {
		freq = append(freq, float64(n))
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(freq)))
	z := NewZipf(c.RAG.Corpus, s)
	if want := z.P(0) * float64(len(reqs)); math.Abs(freq[0]-want) > 4*math.Sqrt(want) {
		t.Errorf("most popular document leads %.0f prompts, want %.0f", freq[0], want)
	}
	var sx, sy, sxx, sxy float64
	const top = 10
	for k := range top {
		x, y := math.Log(float64(k+1)), math.Log(freq[k])
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	slope := (top*sxy - sx*sy) / (top*sxx - sx*sx)
	if math.Abs(slope+s) > 0.2 {
		t.Errorf("rank-frequency slope %.2f over the top %d, want %.1f", slope, top, -s)
	}
	if len(count) < 100 {
		t.Errorf("only %d distinct leading documents: no long tail", len(count))
	}

	// Popularity order: the K documents sorted by rank, so the most popular
	// leads far more prompts than in relevance order.
	c.RAG.Order = "popularity"
	lead0 := 0
	for _, r := range generate(t, c) {
		if !slices.IsSorted(r.Docs) {
			t.Fatalf("popularity order: documents %v", r.Docs)
		}
		if r.Docs[0] == 0 {
			lead0++
		}
	}
	if float64(lead0) < 1.5*freq[0] {
		t.Errorf("popularity order: document 0 leads %d prompts, relevance order %.0f", lead0, freq[0])
	}
}
