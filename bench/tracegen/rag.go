package tracegen

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// RAG is document reuse: each request is system prompt (a few, Zipf
// popularity) + K distinct documents retrieved from a corpus + a question.
// Documents are drawn by Zipf popularity over the corpus (rank 0 the most
// popular; each document's length drawn once), so popular documents recur
// and requests whose system prompt and leading documents agree share those
// blocks. Order "relevance" keeps the retrieval (draw) order, so only the
// first document's popularity decides the shared prefix; "popularity" sorts
// the K documents by rank, as a cache-aware RAG pipeline would, so the
// popular ones lead more prompts.
type RAGConfig struct {
	SystemPrompts int
	SystemLen     Dist
	Corpus        int     // documents in the corpus
	Zipf          float64 // document popularity exponent
	K             int     // documents per prompt
	DocLen        Dist    // tokens of each document
	QuestionLen   Dist
	OutputLen     Dist
	Order         string // "relevance" or "popularity"
}

// DefaultRAG: 2 system prompts of 400 tokens, a corpus of 2,000 documents
// of 800 tokens on average, Zipf 1.0, 4 documents per prompt in relevance
// order, questions of 60 tokens, answers of 250.
func DefaultRAG() RAGConfig {
	return RAGConfig{
		SystemPrompts: 2,
		SystemLen:     LogNormal(400, 0.5),
		Corpus:        2000,
		Zipf:          1.0,
		K:             4,
		DocLen:        LogNormal(800, 0.5),
		QuestionLen:   LogNormal(60, 0.8),
		OutputLen:     LogNormal(250, 0.7),
		Order:         "relevance",
	}
}

func (c RAGConfig) validate() error {
	if err := validateShape("rag", c.SystemPrompts, c.SystemLen, c.DocLen, c.QuestionLen, c.OutputLen); err != nil {
		return err
	}
	switch {
	case c.Corpus < 1:
		return fmt.Errorf("rag: corpus %d: want at least one document", c.Corpus)
	case c.K < 0 || c.K > c.Corpus:
		return fmt.Errorf("rag: %d documents per prompt from a corpus of %d", c.K, c.Corpus)
	case c.Zipf < 0:
		return fmt.Errorf("rag: negative Zipf exponent %v", c.Zipf)
	case c.Order != "relevance" && c.Order != "popularity":
		return fmt.Errorf("rag: order %q: want relevance or popularity", c.Order)
	}
	return nil
}

type rag struct {
	cfg        RAGConfig
	r          *rand.Rand
	b          *blocker
	systems    []segment
	sysZipf    *Zipf
	docs       []segment
	docZipf    *Zipf
	maxContext int
	n          int
}

func newRAG(c RAGConfig, zipf float64, r *rand.Rand, b *blocker, maxContext int) shape {
	g := &rag{cfg: c, r: r, b: b, sysZipf: NewZipf(c.SystemPrompts, zipf), docZipf: NewZipf(c.Corpus, c.Zipf), maxContext: maxContext}
	for range c.SystemPrompts {
		g.systems = append(g.systems, b.segment(min(c.SystemLen.Count(r), maxContext-1)))
	}
	for range c.Corpus {
		g.docs = append(g.docs, b.segment(c.DocLen.Count(r)))
	}
	return g
}

func (g *rag) name() string { return ShapeRAG }

func (g *rag) next(t float64) Request {
	var p prompt
	sys := g.sysZipf.Sample(g.r)
	p.add(g.systems[sys])
	q := min(g.cfg.QuestionLen.Count(g.r), g.maxContext-p.tokens)
	out := g.cfg.OutputLen.Count(g.r)
	// K distinct documents by popularity; after many repeats (a steep Zipf
	// over a small corpus) take the most popular unused ones.
	docs := make([]int, 0, g.cfg.K)
	for tries := 0; len(docs) < g.cfg.K; tries++ {
		d := g.docZipf.Sample(g.r)
		if tries > 100*g.cfg.K {
			d = 0
			for slices.Contains(docs, d) {
				d++
			}
		}
		if !slices.Contains(docs, d) {
			docs = append(docs, d)
		}
	}
	if g.cfg.Order == "popularity" {
		slices.Sort(docs)
	}
	used := docs[:0:0]
	for _, d := range docs {
		if p.tokens+g.docs[d].n+q > g.maxContext {
			break
		}
		p.add(g.docs[d])
		used = append(used, d)
	}
	p.add(g.b.segment(q))
	g.n++
	return Request{At: t, InputLength: p.tokens, OutputLength: out, HashIDs: g.b.ids(&p),
		Shape: ShapeRAG, Session: g.n - 1, System: sys, Docs: used}
}
