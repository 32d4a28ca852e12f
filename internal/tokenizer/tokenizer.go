package tokenizer

import (
	"errors"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// ErrInvalidUTF8 is returned for text that is not valid UTF-8.
var ErrInvalidUTF8 = errors.New("text is not valid UTF-8")

// Tokenizer encodes text as a tokenizer.json (and tokenizer_config.json) says. It is safe for
// concurrent use.
type Tokenizer struct {
	name   string
	class  string
	nfc    bool
	split  splitter
	model  *bpe
	added  *addedTrie
	prefix []uint32
	suffix []uint32
	cache  *wordCache
	segs   *segmentCache
}

// Encode returns the ids of text; with addSpecial, the post-processor's special tokens (BOS,
// EOS) are added as the engine's completions endpoint adds them. Added tokens in the text (for
// example <|im_start|>) are recognized whatever addSpecial says.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]uint32, error) {
	return t.AppendEncode(make([]uint32, 0, len(text)/3+4), text, addSpecial)
}

// AppendEncode is Encode appending to dst.
func (t *Tokenizer) AppendEncode(dst []uint32, text string, addSpecial bool) ([]uint32, error) {
	if !utf8.ValidString(text) {
		return dst, ErrInvalidUTF8
	}
	if addSpecial {
		dst = append(dst, t.prefix...)
	}
	t.added.split(text,
		func(s string) { dst = t.encodeSegment(dst, s) },
		func(id uint32) { dst = append(dst, id) })
	if addSpecial {
		dst = append(dst, t.suffix...)
	}
	return dst, nil
}

// encodeSegment encodes a stretch between added tokens, through the segment cache.
func (t *Tokenizer) encodeSegment(dst []uint32, s string) []uint32 {
	if ids, ok := t.segs.get(s); ok {
		return append(dst, ids...)
	}
	n := len(dst)
	dst = t.encodeText(dst, s)
	t.segs.put(s, dst[n:])
	return dst
}

// encodeText encodes a stretch without added tokens: normalize, pre-tokenize, BPE each word.
func (t *Tokenizer) encodeText(dst []uint32, s string) []uint32 {
	if t.nfc && !norm.NFC.IsNormalString(s) {
		s = norm.NFC.String(s)
	}
	for len(s) > 0 {
		n := t.split.next(s)
		dst = t.encodeWord(dst, s[:n])
		s = s[n:]
	}
	return dst
}

func (t *Tokenizer) encodeWord(dst []uint32, w string) []uint32 {
	if ids, ok := t.cache.get(w); ok {
		return append(dst, ids...)
	}
	n := len(dst)
	dst = t.model.encodeWord(dst, w)
	t.cache.put(w, dst[n:])
	return dst
}

// tokenID returns the id of an added token or vocab entry given as its text.
func (t *Tokenizer) tokenID(s string) (uint32, bool) {
	if n, id := t.added.longest(s); n == len(s) && n > 0 {
		return id, true
	}
	ids := t.encodeText(nil, s)
	if len(ids) == 1 {
		return ids[0], true
	}
	return 0, false
}

// TokenID returns the id of a special or added token by its text, for example "<|im_start|>".
func (t *Tokenizer) TokenID(s string) (uint32, bool) { return t.tokenID(s) }

// Name is the path of the tokenizer.json the Tokenizer was loaded from.
func (t *Tokenizer) Name() string { return t.name }

// CacheStats reports the word cache's hits and misses since load.
func (t *Tokenizer) CacheStats() (hits, misses uint64) { return t.cache.stats() }

// SegmentCacheStats reports the segment cache's hits and misses since load (segments of at
// least 64 bytes between added tokens).
func (t *Tokenizer) SegmentCacheStats() (hits, misses uint64) { return t.segs.stats() }
