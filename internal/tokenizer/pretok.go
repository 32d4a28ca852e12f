package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The Split patterns implemented by hand, exactly as they appear in tokenizer.json files.
const (
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// Llama-3 and cl100k: digits in groups of up to three.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Qwen2 and Qwen3: single digits.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitter cuts normalized text into pre-tokens; BPE never merges across their boundaries.
type splitter interface {
	// next returns the length in bytes of the pre-token that starts s (len(s) > 0).
	next(s string) int
}

// splitterFor returns the hand-written splitter of a known pattern.
func splitterFor(pattern string) (splitter, bool) {
	switch pattern {
	case patternGPT2:
		return gpt2Splitter{}, true
	case patternLlama3:
		return cl100kSplitter{maxDigits: 3}, true
	case patternQwen2:
		return cl100kSplitter{maxDigits: 1}, true
	}
	return nil, false
}

func isL(r rune) bool {
	if r < utf8.RuneSelf {
		return (r|0x20) >= 'a' && (r|0x20) <= 'z'
	}
	return unicode.IsLetter(r)
}

func isN(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= '0' && r <= '9'
	}
	return unicode.IsNumber(r)
}

// isS is the regex engine's \s: the Unicode White_Space property.
func isS(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || (r >= '\t' && r <= '\r')
	}
	return unicode.Is(unicode.White_Space, r)
}

// isP is [^\s\p{L}\p{N}].
func isP(r rune) bool { return r >= 0 && !isS(r) && !isL(r) && !isN(r) }

func isNL(r rune) bool { return r == '\r' || r == '\n' }

// at decodes the rune at s[i:], or -1 past the end.
func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// span advances from i over runes satisfying f, at most max of them (max < 0: no limit).
func span(s string, i int, f func(rune) bool, max int) int {
	for n := 0; i < len(s) && n != max; n++ {
		r, w := at(s, i)
		if !f(r) {
			break
		}
		i += w
	}
	return i
}

// contraction returns the length of 's 't 're 've 'm 'll 'd at the start of s (s[0] == '\”),
// or 0. With fold, letters match case-insensitively under Unicode simple case folding.
func contraction(s string, fold bool) int {
	eq := func(i int, want byte) (int, bool) {
		r, w := at(s, i)
		if r == rune(want) {
			return w, true
		}
		if !fold {
			return 0, false
		}
		if r == rune(want-'a'+'A') || (want == 's' && r == 0x17F) || (want == 'k' && r == 0x212A) {
			return w, true
		}
		return 0, false
	}
	for _, c := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
		i := 1
		ok := true
		for k := 0; k < len(c) && ok; k++ {
			var w int
			w, ok = eq(i, c[k])
			i += w
		}
		if ok {
			return i
		}
	}
	return 0
}

// whitespace handles `\s+(?!\S)|\s+` at a whitespace rune: the run, less its last rune when a
// non-space follows and the run has more than one rune.
func whitespace(s string, end int) int {
	if end == len(s) {
		return end
	}
	_, w := utf8.DecodeLastRuneInString(s[:end])
	if end-w > 0 {
		return end - w
	}
	return end
}

type gpt2Splitter struct{}

func (gpt2Splitter) next(s string) int {
	r0, w0 := at(s, 0)
	if r0 == '\'' {
		if n := contraction(s, false); n > 0 {
			return n
		}
	}
	i := 0
	if r0 == ' ' {
		i = 1
	}
	r, w := at(s, i)
	switch {
	case isL(r):
		return span(s, i+w, isL, -1)
	case isN(r):
		return span(s, i+w, isN, -1)
	case isP(r):
		return span(s, i+w, isP, -1)
	}
	if isS(r0) {
		return whitespace(s, span(s, w0, isS, -1))
	}
	return w0
}

// cl100kSplitter is the Llama-3 / cl100k pattern, and Qwen2's with maxDigits 1.
type cl100kSplitter struct{ maxDigits int }

func (c cl100kSplitter) next(s string) int {
	r0, w0 := at(s, 0)
	if r0 == '\'' {
		if n := contraction(s, true); n > 0 {
			return n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isL(r0) {
		return span(s, w0, isL, -1)
	}
	r1, w1 := at(s, w0)
	if !isNL(r0) && !isN(r0) && isL(r1) {
		return span(s, w0+w1, isL, -1)
	}
	// \p{N}{1,3}
	if isN(r0) {
		return span(s, w0, isN, c.maxDigits-1)
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if r0 == ' ' && isP(r1) {
		return span(s, span(s, w0+w1, isP, -1), isNL, -1)
	}
	if isP(r0) {
		return span(s, span(s, w0, isP, -1), isNL, -1)
	}
	// \s*[\r\n]+ : the whitespace run up to its last line break.
	end := span(s, 0, isS, -1)
	for i := end; i > 0; {
		r, w := utf8.DecodeLastRuneInString(s[:i])
		if isNL(r) {
			return i
		}
		i -= w
	}
	if end > 0 {
		return whitespace(s, end)
	}
	return w0
}
