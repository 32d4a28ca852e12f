// Package tracegen writes synthetic Mooncake-format traces (JSONL: timestamp
// in ms, input_length, output_length, hash_ids with one id per block of
// BlockTokens tokens) of distinct shapes: multi-turn chat (chat.go), agentic
// loops (agent.go), document reuse (rag.go) or a mix, under an arrival
// process chosen independently (arrivals.go), with lengths from named
// distributions (dist.go). The same Config (seed included) gives the same
// bytes.
package tracegen

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Shapes.
const (
	ShapeChat  = "chat"
	ShapeAgent = "agent"
	ShapeRAG   = "rag"
	ShapeMix   = "mix"
)

// Request is one generated request: a trace line plus what produced it.
type Request struct {
	// At is the arrival in seconds from the start of the trace.
	At           float64
	InputLength  int
	OutputLength int
	HashIDs      []uint64
	// Shape is chat, agent or rag.
	Shape string
	// Session numbers the conversation, agent loop or RAG query within its
	// shape, in order of start (warm-up included); Step is the request's
	// 0-based turn or step within it.
	Session, Step int
	// System is the system prompt's popularity rank (0 the most popular).
	System int
	// Docs are a RAG prompt's document ranks, in prompt order.
	Docs []int
}

// Timestamp is the trace's timestamp: whole milliseconds.
func (r Request) Timestamp() int64 { return int64(r.At * 1000) }

// shape generates one shape's requests, one per arrival.
type shape interface {
	name() string
	next(t float64) Request
}

// Mix is the fraction of requests of each shape (normalised).
type Mix struct {
	Chat, Agent, RAG float64
}

// String is the form Set reads.
func (m *Mix) String() string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	return "chat=" + f(m.Chat) + ",agent=" + f(m.Agent) + ",rag=" + f(m.RAG)
}

// Set parses "chat=0.5,agent=0.3,rag=0.2" (missing shapes get 0).
func (m *Mix) Set(s string) error {
	var v Mix
	for _, part := range strings.Split(s, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if !ok || err != nil || f < 0 {
			return fmt.Errorf("mix %q: want chat=W,agent=W,rag=W with weights >= 0", s)
		}
		switch strings.TrimSpace(k) {
		case ShapeChat:
			v.Chat = f
		case ShapeAgent:
			v.Agent = f
		case ShapeRAG:
			v.RAG = f
		default:
			return fmt.Errorf("mix %q: unknown shape %q", s, k)
		}
	}
	if v.Chat+v.Agent+v.RAG <= 0 {
		return fmt.Errorf("mix %q: all weights are 0", s)
	}
	*m = v
	return nil
}

// Config is everything a trace depends on.
type Config struct {
	// Shape is chat, agent, rag or mix (Mix gives the request fractions).
	Shape string
	Mix   Mix
	// Arrival is the arrival process; a diurnal Period of 0 means Duration.
	Arrival Arrival
	// Duration is the trace's length. Warmup runs the generator this long
	// before the trace starts and drops those requests, so the trace opens
	// with conversations and loops in progress rather than all cold.
	Duration, Warmup time.Duration
	Seed             uint64
	// BlockTokens is the number of tokens one hash id stands for.
	BlockTokens int
	// MaxContext caps prompts, in tokens: a session ends before a step
	// that would exceed it; a RAG prompt takes fewer documents.
	MaxContext int
	// GenPerToken is how long an answer takes to generate per output token,
	// added before a session's next step may arrive.
	GenPerToken time.Duration
	// Zipf is the system prompts' popularity exponent (all shapes).
	Zipf  float64
	Chat  ChatConfig
	Agent AgentConfig
	RAG   RAGConfig
}

// DefaultConfig is chat at 4 requests/s, Poisson, 10 minutes after a
// 5-minute warm-up, 512-token blocks.
func DefaultConfig() Config {
	return Config{
		Shape: ShapeChat,
		Mix:   Mix{Chat: 0.5, Agent: 0.3, RAG: 0.2},
		Arrival: Arrival{Process: Poisson, Rate: 4, BurstOn: 20, BurstOff: 40,
			Amplitude: 0.6},
		Duration:    10 * time.Minute,
		Warmup:      5 * time.Minute,
		Seed:        1,
		BlockTokens: 512,
		MaxContext:  32768,
		GenPerToken: 10 * time.Millisecond,
		Zipf:        1.0,
		Chat:        DefaultChat(),
		Agent:       DefaultAgent(),
		RAG:         DefaultRAG(),
	}
}

func validateShape(name string, systems int, dists ...Dist) error {
	if systems < 1 {
		return fmt.Errorf("%s: %d system prompts: want at least one", name, systems)
	}
	for _, d := range dists {
		if err := d.Validate(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// weights returns each shape's share of requests.
func (c Config) weights() (chat, agent, rag float64, err error) {
	switch c.Shape {
	case ShapeChat:
		return 1, 0, 0, nil
	case ShapeAgent:
		return 0, 1, 0, nil
	case ShapeRAG:
		return 0, 0, 1, nil
	case ShapeMix:
		sum := c.Mix.Chat + c.Mix.Agent + c.Mix.RAG
		if !(sum > 0) || c.Mix.Chat < 0 || c.Mix.Agent < 0 || c.Mix.RAG < 0 {
			return 0, 0, 0, fmt.Errorf("mix %s: want weights >= 0, not all 0", c.Mix.String())
		}
		return c.Mix.Chat / sum, c.Mix.Agent / sum, c.Mix.RAG / sum, nil
	}
	return 0, 0, 0, fmt.Errorf("shape %q: want chat, agent, rag or mix", c.Shape)
}

// Validate reports an unusable configuration.
func (c Config) Validate() error {
	chat, agent, rag, err := c.weights()
	if err != nil {
		return err
	}
	a := c.Arrival
	if a.Process == Diurnal && a.Period == 0 {
		a.Period = c.Duration.Seconds()
	}
	switch {
	case c.Duration <= 0 || c.Warmup < 0:
		return fmt.Errorf("duration %v, warm-up %v: want a positive duration and a warm-up >= 0", c.Duration, c.Warmup)
	case c.BlockTokens < 1:
		return fmt.Errorf("block tokens %d: want at least 1", c.BlockTokens)
	case c.MaxContext < 2:
		return fmt.Errorf("max context %d tokens: want at least 2", c.MaxContext)
	case c.GenPerToken < 0 || c.Zipf < 0:
		return fmt.Errorf("gen-per-token %v, zipf %v: want both >= 0", c.GenPerToken, c.Zipf)
	}
	if err := a.Validate(); err != nil {
		return err
	}
	if chat > 0 {
		if err := c.Chat.validate(); err != nil {
			return err
		}
	}
	if agent > 0 {
		if err := c.Agent.validate(); err != nil {
			return err
		}
	}
	if rag > 0 {
		return c.RAG.validate()
	}
	return nil
}

// Random streams: each concept draws from its own, so the arrival times do
// not depend on the shape's parameters and one shape's draws do not depend
// on the others'.
const (
	streamArrivals = iota + 1
	streamMix
	streamChat
	streamAgent
	streamRAG
)

// Generate produces the trace: requests arriving in [0, Duration), in
// arrival order, with hash ids numbered from 0 in order of first appearance.
func Generate(c Config) ([]Request, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Arrival.Process == Diurnal && c.Arrival.Period == 0 {
		c.Arrival.Period = c.Duration.Seconds()
	}
	stream := func(s uint64) *rand.Rand { return rand.New(rand.NewPCG(c.Seed, s)) }
	b := newBlocker(c.BlockTokens)
	gen := c.GenPerToken.Seconds()
	chat, agent, rag, _ := c.weights()
	var (
		shapes []shape
		cum    []float64
		sum    float64
	)
	addShape := func(w float64, mk func() shape) {
		if w > 0 {
			sum += w
			shapes, cum = append(shapes, mk()), append(cum, sum)
		}
	}
	addShape(chat, func() shape { return newChat(c.Chat, c.Zipf, stream(streamChat), b, gen, c.MaxContext) })
	addShape(agent, func() shape { return newAgent(c.Agent, c.Zipf, stream(streamAgent), b, gen, c.MaxContext) })
	addShape(rag, func() shape { return newRAG(c.RAG, c.Zipf, stream(streamRAG), b, c.MaxContext) })

	mix := stream(streamMix)
	arr := c.Arrival.Start(stream(streamArrivals), -c.Warmup.Seconds())
	end := c.Duration.Seconds()
	var out []Request
	for t := arr.Next(); t < end; t = arr.Next() {
		sh := shapes[0]
		if len(shapes) > 1 {
			u := mix.Float64() * sum
			for i, cu := range cum {
				if u < cu {
					sh = shapes[i]
					break
				}
			}
		}
		r := sh.next(t)
		if t >= 0 {
			out = append(out, r)
		}
	}
	renumber(out)
	return out, nil
}

// renumber maps hash ids to 0, 1, ... in order of first appearance, as in
// Mooncake's traces (ids first used during the warm-up would otherwise leave
// gaps).
func renumber(reqs []Request) {
	ids := make(map[uint64]uint64)
	for _, r := range reqs {
		for i, id := range r.HashIDs {
			n, ok := ids[id]
			if !ok {
				n = uint64(len(ids))
				ids[id] = n
			}
			r.HashIDs[i] = n
		}
	}
}
