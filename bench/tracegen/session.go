package tracegen

import (
	"container/heap"
	"math/rand/v2"
)

// Sessions whose context grows: chat conversations and agent loops. A
// session starts with a system prompt (one of a few, Zipf popularity) and a
// first message; each later request's prompt is the previous prompt, the
// previous answer (output_length tokens) and a newly appended message, so it
// extends the previous prompt block for block. A session has a drawn number
// of steps and ends early when the next prompt would exceed the context
// limit.
//
// Arrivals come from the arrival process, not from the sessions: each
// arrival is the next step of the session that has been ready longest (its
// previous answer generated, at genPerToken per output token, and its gap -
// think time or tool time - elapsed), or the first step of a new session
// when none is ready. So the request rate and its burstiness are exactly the
// arrival process's, and gaps are at least the drawn ones (longer when
// arrivals are sparse, as in a diurnal trough or a burst's off period).

// growConfig is what distinguishes one growing shape from another.
type growConfig struct {
	systems   int
	systemLen Dist
	zipf      float64
	first     Dist // tokens of the first message after the system prompt
	appended  Dist // tokens appended each later step, after the previous answer
	output    Dist
	steps     Dist
	gap       Dist // seconds from an answer to the session's next request
}

type session struct {
	id, system  int
	step, steps int
	p           prompt
	lastOut     int     // the previous answer, the next step's first appended segment
	next        int     // tokens the next step appends after the answer
	ready       float64 // when the next step may arrive
}

// readyQueue orders sessions by ready time (then by id, so ties are
// deterministic).
type readyQueue []*session

func (q readyQueue) Len() int { return len(q) }
func (q readyQueue) Less(i, j int) bool {
	if q[i].ready != q[j].ready {
		return q[i].ready < q[j].ready
	}
	return q[i].id < q[j].id
}
func (q readyQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *readyQueue) Push(x any)   { *q = append(*q, x.(*session)) }
func (q *readyQueue) Pop() any {
	old := *q
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return s
}

// growing generates one growing shape's requests.
type growing struct {
	shape       string
	cfg         growConfig
	r           *rand.Rand
	b           *blocker
	systems     []segment
	sysZipf     *Zipf
	genPerToken float64
	maxContext  int
	ready       readyQueue
	sessions    int
}

func newGrowing(shape string, cfg growConfig, r *rand.Rand, b *blocker, genPerToken float64, maxContext int) *growing {
	g := &growing{shape: shape, cfg: cfg, r: r, b: b, sysZipf: NewZipf(cfg.systems, cfg.zipf),
		genPerToken: genPerToken, maxContext: maxContext}
	for range cfg.systems {
		g.systems = append(g.systems, b.segment(min(cfg.systemLen.Count(r), maxContext-1)))
	}
	return g
}

func (g *growing) name() string { return g.shape }

func (g *growing) next(t float64) Request {
	var s *session
	if len(g.ready) > 0 && g.ready[0].ready <= t {
		s = heap.Pop(&g.ready).(*session)
		s.p.add(g.b.segment(s.lastOut), g.b.segment(s.next))
		s.step++
	} else {
		s = &session{id: g.sessions, system: g.sysZipf.Sample(g.r)}
		g.sessions++
		sys := g.systems[s.system]
		s.p.add(sys, g.b.segment(min(g.cfg.first.Count(g.r), g.maxContext-sys.n)))
		s.steps = g.cfg.steps.Count(g.r)
	}
	out := g.cfg.output.Count(g.r)
	req := Request{At: t, InputLength: s.p.tokens, OutputLength: out, HashIDs: g.b.ids(&s.p),
		Shape: g.shape, Session: s.id, Step: s.step, System: s.system}
	s.lastOut = out
	if s.step+1 < s.steps {
		s.next = g.cfg.appended.Count(g.r)
		if s.p.tokens+out+s.next <= g.maxContext {
			s.ready = t + float64(out)*g.genPerToken + g.cfg.gap.Sample(g.r)
			heap.Push(&g.ready, s)
		}
	}
	return req
}
