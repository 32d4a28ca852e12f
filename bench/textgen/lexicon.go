// Package textgen turns trace requests into prompt text that a real tokenizer encodes to exactly
// the request's tokens, so the text path (gateway text -> router tokenizer, engine tokenizer) can
// be load-tested with the same traces as the token path.
//
// Each token of a block is a word from a lexicon: vocabulary entries that are a space and a
// lowercase ASCII word (byte-level BPE's "Ġword") and that the tokenizer encodes alone as that one
// token. Every supported pre-tokenizer splits " word" off as a piece of its own, and BPE never
// merges across pieces, so a run of such words encodes to exactly its words' tokens.
package textgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/kvrouter/kvrouter/bench/trace"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// ErrSmallLexicon is returned when a vocabulary has too few usable words.
var ErrSmallLexicon = errors.New("vocabulary has too few single-token words")

// MinWords is the fewest words a lexicon needs: fewer would make distinct blocks collide.
const MinWords = 1024

// Lexicon maps trace tokens to words of one tokenizer.
type Lexicon struct {
	tok   *tokenizer.Tokenizer
	words []string // " word", by ascending id
	ids   []uint32
}

// Load reads the tokenizer files in dir (tokenizer.json, and tokenizer_config.json if present)
// and builds the lexicon from the tokenizer.json vocabulary.
func Load(dir string) (*Lexicon, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "tokenizer.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Model struct {
			Vocab map[string]uint32 `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return New(tok, f.Model.Vocab)
}

// New builds the lexicon of tok from its vocabulary (byte-level token text to id).
func New(tok *tokenizer.Tokenizer, vocab map[string]uint32) (*Lexicon, error) {
	type entry struct {
		word string
		id   uint32
	}
	var es []entry
	for s, id := range vocab {
		if w, ok := spaceWord(s); ok {
			es = append(es, entry{w, id})
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].id < es[j].id })
	l := &Lexicon{tok: tok}
	for _, e := range es {
		ids, err := tok.Encode(e.word, false)
		if err != nil || len(ids) != 1 || ids[0] != e.id {
			continue // merges would not produce it alone: not usable
		}
		l.words = append(l.words, e.word)
		l.ids = append(l.ids, e.id)
	}
	if len(l.words) < MinWords {
		return nil, fmt.Errorf("%w: %d, want %d", ErrSmallLexicon, len(l.words), MinWords)
	}
	return l, nil
}

// spaceWord reports whether s is "Ġ" and 2 to 12 lowercase ASCII letters, and returns it as text.
func spaceWord(s string) (string, bool) {
	const g = "Ġ"
	if len(s) < len(g)+2 || len(s) > len(g)+12 || s[:len(g)] != g {
		return "", false
	}
	for i := len(g); i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return "", false
		}
	}
	return " " + s[len(g):], true
}

// Tokenizer is the tokenizer the lexicon was built for.
func (l *Lexicon) Tokenizer() *tokenizer.Tokenizer { return l.tok }

// Len is the number of words.
func (l *Lexicon) Len() int { return len(l.words) }

// word is the index of token i of block id.
func (l *Lexicon) word(id uint64, i int) int {
	return int(splitmix64(id*uint64(trace.IDTokens)+uint64(i)) % uint64(len(l.words)))
}

// blockLen is the number of tokens of r's k-th block, as trace.Request.Tokens counts them.
func blockLen(r trace.Request, k int) int {
	b := r.IDBlockTokens()
	if k == len(r.HashIDs)-1 {
		return r.InputLength - b*(len(r.HashIDs)-1)
	}
	return b
}

// Tokens appends r's prompt tokens in this lexicon to dst: what Text encodes to.
func (l *Lexicon) Tokens(r trace.Request, dst []uint32) []uint32 {
	for k, id := range r.HashIDs {
		for i := range blockLen(r, k) {
			dst = append(dst, l.ids[l.word(id, i)])
		}
	}
	return dst
}

// AppendText appends r's prompt text to dst.
func (l *Lexicon) AppendText(dst []byte, r trace.Request) []byte {
	for k, id := range r.HashIDs {
		for i := range blockLen(r, k) {
			dst = append(dst, l.words[l.word(id, i)]...)
		}
	}
	return dst
}

// Text is r's prompt text.
func (l *Lexicon) Text(r trace.Request) string { return string(l.AppendText(nil, r)) }

// Texts returns the prompt text of every request, in order.
func (l *Lexicon) Texts(reqs []trace.Request) []string {
	out := make([]string, len(reqs))
	var buf []byte
	for i, r := range reqs {
		buf = l.AppendText(buf[:0], r)
		out[i] = string(buf)
	}
	return out
}

// Words returns a copy of the words, for tests and inspection.
func (l *Lexicon) Words() []string { return slices.Clone(l.words) }

// splitmix64 is a fast, well-mixed bijection on uint64.
func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}
