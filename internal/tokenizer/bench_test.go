package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchTexts are the texts prompts are built from: "mixed" is the golden corpus (the
// 30,000-character runs left out: scripts, digits, emoji, special tokens), "docs" the
// repository's Markdown and this package's Go source, paragraph by paragraph (English and code).
func benchTexts(b *testing.B, kind, model string) []string {
	b.Helper()
	var texts []string
	if kind == "mixed" {
		for _, g := range readTextGoldens(b, model) {
			if len(g.Text) < 2000 && len(g.Text) > 0 {
				texts = append(texts, g.Text)
			}
		}
		return texts
	}
	files, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	gofiles, _ := filepath.Glob("*.go")
	for _, f := range append(append(files, filepath.Join("..", "..", "README.md")), gofiles...) {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range strings.SplitAfter(string(data), "\n\n") {
			texts = append(texts, p)
		}
	}
	if len(texts) < 100 {
		b.Fatalf("%d paragraphs of docs and source, want 100 or more", len(texts))
	}
	return texts
}

// benchPrompts builds n prompts of about 8,192 tokens from texts, in a fixed order.
func benchPrompts(tk *Tokenizer, texts []string, sep string, n int) []string {
	var out []string
	var sb strings.Builder
	toks, k := 0, 0
	for len(out) < n {
		t := texts[k%len(texts)]
		k += 7
		ids, _ := tk.Encode(t, false)
		sb.WriteString(t)
		sb.WriteString(sep)
		toks += len(ids) + 1
		if toks >= 8192 {
			out = append(out, sb.String())
			sb.Reset()
			toks = 0
		}
	}
	return out
}

// BenchmarkEncode reports MB/s of text on 8,192-token prompts: cold (an empty word cache for
// each prompt) and warm (the cache kept across prompts). The corpus mixes scripts, digits and
// emoji, so it is harder than English prose.
func BenchmarkEncode(b *testing.B) {
	for _, m := range models {
		tk := loadModel(b, m)
		for _, kind := range []string{"mixed", "docs"} {
			prompts := benchPrompts(tk, benchTexts(b, kind, m), map[string]string{"mixed": " ", "docs": ""}[kind], 16)
			if dir := os.Getenv("KVROUTER_BENCH_PROMPTS"); dir != "" {
				writePrompts(b, filepath.Join(dir, m+"-"+kind+".txt"), prompts)
			}
			var bytes int64
			for _, p := range prompts {
				bytes += int64(len(p))
			}
			for _, mode := range []string{"cold", "warm"} {
				b.Run(m+"/"+kind+"/"+mode, func(b *testing.B) {
					b.SetBytes(bytes / int64(len(prompts)))
					b.ReportAllocs()
					tk.cache = newWordCache(defaultCacheEntries)
					tk.segs = newSegmentCache(0) // a prompt is one segment: measure the encoder
					for i := 0; i < b.N; i++ {
						if mode == "cold" {
							tk.cache = newWordCache(defaultCacheEntries)
						}
						if _, err := tk.Encode(prompts[i%len(prompts)], true); err != nil {
							b.Fatal(err)
						}
					}
					h, ms := tk.CacheStats()
					b.ReportMetric(float64(h)/float64(max(h+ms, 1)), "hit-rate")
				})
			}
		}
	}
}

// writePrompts saves the prompts (NUL-separated) for the JS reference's benchmark
// (testdata/gen/bench.js), so both measure the same text.
func writePrompts(b *testing.B, path string, prompts []string) {
	if err := os.WriteFile(path, []byte(strings.Join(prompts, "\x00")), 0o644); err != nil {
		b.Fatal(err)
	}
}

// conversations renders a conversation-shaped trace in ChatML (Qwen3's format): each request is
// the conversation so far plus a new user turn, as a multi-turn chat sends it.
func conversations(texts []string, convs, turns int) []string {
	var out []string
	k := 0
	next := func() string {
		var sb strings.Builder
		for sb.Len() < 600 {
			sb.WriteString(texts[k%len(texts)])
			k += 13
		}
		return sb.String()
	}
	for c := 0; c < convs; c++ {
		var sb strings.Builder
		sb.WriteString("<|im_start|>system\nYou are a helpful assistant. " + next() + "<|im_end|>\n")
		for t := 0; t < turns; t++ {
			sb.WriteString("<|im_start|>user\n" + next() + "<|im_end|>\n")
			out = append(out, sb.String()+"<|im_start|>assistant\n")
			sb.WriteString("<|im_start|>assistant\n" + next() + "<|im_end|>\n")
		}
	}
	return out
}

// BenchmarkEncodeChat encodes a conversation-shaped trace (8 conversations of 8 turns, each
// request the whole conversation so far) with the segment cache off and on, and reports its hit
// rate: earlier turns are segments seen before.
func BenchmarkEncodeChat(b *testing.B) {
	tk := loadModel(b, "qwen3")
	reqs := conversations(benchTexts(b, "docs", "qwen3"), 8, 8)
	var bytes int64
	for _, r := range reqs {
		bytes += int64(len(r))
	}
	for _, mode := range []string{"segments-off", "segments-on"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(bytes / int64(len(reqs)))
			for i := 0; i < b.N; i++ {
				if i%len(reqs) == 0 { // each pass over the trace starts cold
					tk.cache = newWordCache(defaultCacheEntries)
					tk.segs = newSegmentCache(map[string]int{"segments-off": 0, "segments-on": defaultSegmentBytes}[mode])
				}
				if _, err := tk.Encode(reqs[i%len(reqs)], false); err != nil {
					b.Fatal(err)
				}
			}
			h, m := tk.SegmentCacheStats()
			b.ReportMetric(float64(h)/float64(max(h+m, 1)), "segment-hit-rate")
			h, m = tk.CacheStats()
			b.ReportMetric(float64(h)/float64(max(h+m, 1)), "word-hit-rate")
		})
	}
}
