package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

var (
	fuzzOnce sync.Once
	fuzzTok  *Tokenizer
	fuzzInv  map[uint32]string // id -> bytes, vocab and added tokens
)

// FuzzEncode: any valid UTF-8 text encodes without panicking; the pre-tokens cover the text
// exactly, in order; the word cache changes nothing (a second encoding, from the cache, and one
// with a fresh cache agree); and ids decode back to the normalized text's bytes (byte-level BPE
// is lossless).
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "Hello  world\n\n", "'S 'll 'ſ", "1234567", "你好 👩‍👩‍👧", "<|im_start|>user\nx<|im_end|>", " \u0085\u00a0\u3000x", strings.Repeat("a", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			if _, err := fuzzTokenizer(t).Encode(s, false); err == nil {
				t.Fatal("invalid UTF-8 accepted")
			}
			return
		}
		tk := fuzzTokenizer(t)
		var pieces []string
		for rest := s; len(rest) > 0; {
			n := tk.split.next(rest)
			if n <= 0 || n > len(rest) {
				t.Fatalf("splitter returned %d for %q", n, rest)
			}
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		if strings.Join(pieces, "") != s {
			t.Fatal("pre-tokens do not cover the text")
		}
		a, err := tk.Encode(s, true)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := tk.Encode(s, true)
		fresh := *tk
		fresh.cache = newWordCache(16)
		fresh.segs = newSegmentCache(0)
		c, _ := fresh.Encode(s, true)
		if !slices.Equal(a, b) || !slices.Equal(a, c) {
			t.Fatalf("encodings differ: %v %v %v", a, b, c)
		}
		var want strings.Builder // the text normalized between added tokens
		tk.added.split(s, func(x string) { want.WriteString(norm.NFC.String(x)) },
			func(id uint32) { want.WriteString(fuzzInv[id]) })
		if got := decode(tk, a); got != want.String() {
			t.Fatalf("ids decode to %q, want %q", got, want.String())
		}
	})
}

func fuzzTokenizer(t *testing.T) *Tokenizer {
	fuzzOnce.Do(func() {
		fuzzTok = loadModel(t, "qwen3")
		fuzzInv = make(map[uint32]string, len(fuzzTok.model.vocab))
		for s, id := range fuzzTok.model.vocab {
			fuzzInv[id] = s
		}
		for n := range fuzzTok.added.nodes {
			if fuzzTok.added.nodes[n].leaf {
				fuzzInv[fuzzTok.added.nodes[n].id] = addedText(fuzzTok.added, n)
			}
		}
	})
	return fuzzTok
}

// decode maps ids back to bytes through the vocab and the added tokens.
func decode(_ *Tokenizer, ids []uint32) string {
	var sb strings.Builder
	for _, id := range ids {
		sb.WriteString(fuzzInv[id])
	}
	return sb.String()
}

// addedText rebuilds the text of trie node n by searching from the root.
func addedText(t *addedTrie, n int) string {
	var walk func(cur int32, prefix []byte) (string, bool)
	walk = func(cur int32, prefix []byte) (string, bool) {
		if int(cur) == n {
			return string(prefix), true
		}
		for b, nx := range t.nodes[cur].next {
			if s, ok := walk(nx, append(prefix, b)); ok {
				return s, true
			}
		}
		return "", false
	}
	s, _ := walk(0, nil)
	return s
}
