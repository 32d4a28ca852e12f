package tracegen

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/trace"
)

// testConfig is a short trace of one shape.
func testConfig(shape, arrival string, d time.Duration) Config {
	c := DefaultConfig()
	c.Shape, c.Arrival.Process, c.Duration, c.Warmup = shape, arrival, d, 2*time.Minute
	return c
}

func generate(t *testing.T, c Config) []Request {
	t.Helper()
	reqs, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) == 0 {
		t.Fatal("empty trace")
	}
	return reqs
}

func encode(t *testing.T, reqs []Request) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, reqs); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var (
	allShapes   = []string{ShapeChat, ShapeAgent, ShapeRAG, ShapeMix}
	allArrivals = []string{Poisson, Bursty, Diurnal}
)

func TestDeterministic(t *testing.T) {
	for _, s := range allShapes {
		for _, a := range allArrivals {
			c := testConfig(s, a, 2*time.Minute)
			first := encode(t, generate(t, c))
			if again := encode(t, generate(t, c)); !bytes.Equal(first, again) {
				t.Errorf("%s/%s: same seed, different bytes", s, a)
			}
			c.Seed++
			if other := encode(t, generate(t, c)); bytes.Equal(first, other) {
				t.Errorf("%s/%s: seeds %d and %d give the same trace", s, a, c.Seed-1, c.Seed)
			}
		}
	}
}

// The arrival times depend on the seed and arrival flags only, not on the
// shape or its parameters.
func TestArrivalsIndependentOfShape(t *testing.T) {
	var times [][]int64
	for _, s := range allShapes {
		var ts []int64
		for _, r := range generate(t, testConfig(s, Bursty, 3*time.Minute)) {
			ts = append(ts, r.Timestamp())
		}
		times = append(times, ts)
	}
	for i := range times[1:] {
		if len(times[i+1]) != len(times[0]) || times[i+1][len(times[0])-1] != times[0][len(times[0])-1] {
			t.Errorf("%s arrivals differ from chat's", allShapes[i+1])
		}
	}
}

func TestRequestRate(t *testing.T) {
	for _, s := range allShapes {
		for _, a := range []string{Poisson, Diurnal} { // diurnal: one whole period
			c := testConfig(s, a, 20*time.Minute)
			c.Arrival.Rate = 5
			reqs := generate(t, c)
			if got := float64(len(reqs)) / c.Duration.Seconds(); math.Abs(got-5) > 0.05*5 {
				t.Errorf("%s/%s: %.2f requests/s, want 5 within 5%%", s, a, got)
			}
		}
	}
	// Bursty converges more slowly (the on/off periods are long): 3 hours.
	c := testConfig(ShapeRAG, Bursty, 3*time.Hour)
	c.RAG.Corpus = 100
	if got := float64(len(generate(t, c))) / c.Duration.Seconds(); math.Abs(got-4) > 0.05*4 {
		t.Errorf("bursty: %.2f requests/s, want 4 within 5%%", got)
	}
}

func TestMixFractions(t *testing.T) {
	c := testConfig(ShapeMix, Poisson, 20*time.Minute)
	c.Mix = Mix{Chat: 2, Agent: 1, RAG: 1}
	n := map[string]float64{}
	reqs := generate(t, c)
	for _, r := range reqs {
		n[r.Shape]++
	}
	for s, want := range map[string]float64{ShapeChat: 0.5, ShapeAgent: 0.25, ShapeRAG: 0.25} {
		if got := n[s] / float64(len(reqs)); math.Abs(got-want) > 0.03 {
			t.Errorf("%s: %.3f of requests, want %.2f", s, got, want)
		}
	}
}

// Every line is well formed for any block size: ceil(input/block) ids, the
// context limit, timestamps in order within the trace, ids numbered from 0
// in order of first appearance; and bench/trace reads it back unchanged.
func TestTraceFormat(t *testing.T) {
	for _, s := range allShapes {
		for _, bt := range []int{512, 100, 16, 1024} {
			c := testConfig(s, Diurnal, 3*time.Minute)
			c.BlockTokens = bt
			c.MaxContext = 20000
			reqs := generate(t, c)
			next := uint64(0)
			for i, r := range reqs {
				if want := (r.InputLength + bt - 1) / bt; len(r.HashIDs) != want {
					t.Fatalf("%s/%d: request %d: %d ids for %d tokens, want %d", s, bt, i, len(r.HashIDs), r.InputLength, want)
				}
				if r.InputLength > c.MaxContext || r.OutputLength < 1 {
					t.Fatalf("%s/%d: request %d: input %d (max %d), output %d", s, bt, i, r.InputLength, c.MaxContext, r.OutputLength)
				}
				if r.Timestamp() < 0 || r.Timestamp() >= c.Duration.Milliseconds() || (i > 0 && r.At < reqs[i-1].At) {
					t.Fatalf("%s/%d: request %d at %v", s, bt, i, r.At)
				}
				for _, id := range r.HashIDs {
					if id > next {
						t.Fatalf("%s/%d: id %d before id %d appeared", s, bt, id, next)
					}
					if id == next {
						next++
					}
				}
			}
			data := encode(t, reqs)
			parsed, err := trace.ParseBlocks(bytes.NewReader(data), 0, bt)
			if err != nil {
				t.Fatalf("%s/%d: bench/trace: %v", s, bt, err)
			}
			if len(parsed) != len(reqs) {
				t.Fatalf("%s/%d: parsed %d of %d requests", s, bt, len(parsed), len(reqs))
			}
			for i, p := range parsed {
				r := reqs[i]
				if p.Arrival != time.Duration(r.Timestamp())*time.Millisecond || p.InputLength != r.InputLength ||
					p.OutputLength != r.OutputLength || len(p.HashIDs) != len(r.HashIDs) || len(p.Tokens(nil)) != r.InputLength {
					t.Fatalf("%s/%d: request %d parsed as %+v", s, bt, i, p)
				}
			}
			if bt != 512 {
				if _, err := trace.Parse(bytes.NewReader(data), 0); err == nil {
					t.Errorf("%s/%d: parsed as 512-token ids", s, bt)
				}
			}
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"shape":      func(c *Config) { c.Shape = "batch" },
		"mix":        func(c *Config) { c.Shape, c.Mix = ShapeMix, Mix{} },
		"rate":       func(c *Config) { c.Arrival.Rate = 0 },
		"arrival":    func(c *Config) { c.Arrival.Process = "hawkes" },
		"duration":   func(c *Config) { c.Duration = 0 },
		"block":      func(c *Config) { c.BlockTokens = 0 },
		"systems":    func(c *Config) { c.Chat.SystemPrompts = 0 },
		"chat dist":  func(c *Config) { c.Chat.Turns = Dist{} },
		"agent dist": func(c *Config) { c.Shape, c.Agent.ToolLen = ShapeAgent, Uniform(5, 1) },
		"rag k":      func(c *Config) { c.Shape, c.RAG.K = ShapeRAG, c.RAG.Corpus+1 },
		"rag order":  func(c *Config) { c.Shape, c.RAG.Order = ShapeRAG, "random" },
	} {
		c := DefaultConfig()
		mut(&c)
		if _, err := Generate(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	var m Mix
	if err := m.Set("chat=1,agent=x"); err == nil {
		t.Error("bad mix accepted")
	}
	if err := m.Set("rag=1"); err != nil || m != (Mix{RAG: 1}) {
		t.Errorf("mix rag=1: %v %v", m, err)
	}
}
