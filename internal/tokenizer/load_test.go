package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyFile is a byte-level BPE tokenizer.json with the Qwen2 pattern, the 256 byte tokens, the
// merges "h e" and "he l", and one special token.
func tinyFile() map[string]any {
	vocab := map[string]any{}
	tab := byteToRune()
	for b := 0; b < 256; b++ {
		vocab[string(tab[b])] = b
	}
	vocab["he"], vocab["hel"] = 256, 257
	return map[string]any{
		"version": "1.0",
		"added_tokens": []any{map[string]any{"id": 300, "content": "<|x|>", "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true}},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patternQwen2}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"decoder":        nil,
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": []any{[]any{"h", "e"}, "he l"}},
	}
}

func parseTiny(t *testing.T, f map[string]any, cfg map[string]any) (*Tokenizer, error) {
	t.Helper()
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var c []byte
	if cfg != nil {
		if c, err = json.Marshal(cfg); err != nil {
			t.Fatal(err)
		}
	}
	return Parse("tiny/tokenizer.json", data, "tiny/tokenizer_config.json", c)
}

func TestTiny(t *testing.T) {
	tk, err := parseTiny(t, tinyFile(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tk.Encode("hello<|x|>h", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint32{257, 'l', 'o', 300, 'h'}; !slices.Equal(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	if _, err := tk.Encode("\xff", false); !errors.Is(err, ErrInvalidUTF8) {
		t.Fatalf("invalid UTF-8: %v", err)
	}
}

// TestRefuse checks that constructs without an exact implementation are refused at load with an
// error naming the file and the construct.
func TestRefuse(t *testing.T) {
	set := func(path string, v any) func(map[string]any) {
		return func(f map[string]any) {
			keys := strings.Split(path, ".")
			m := f
			for _, k := range keys[:len(keys)-1] {
				m = m[k].(map[string]any)
			}
			m[keys[len(keys)-1]] = v
		}
	}
	pre := func(i int, k string, v any) func(map[string]any) {
		return func(f map[string]any) {
			f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[i].(map[string]any)[k] = v
		}
	}
	for _, c := range []struct {
		name, construct string
		edit            func(map[string]any)
	}{
		{"unknown pattern", "Split pattern", pre(0, "pattern", map[string]any{"Regex": `\w+|\s+(?!\S)`})},
		{"string pattern", "only Split with a Regex", pre(0, "pattern", map[string]any{"String": " "})},
		{"merged behavior", "only Split with a Regex", pre(0, "behavior", "MergedWithPrevious")},
		{"prefix space", "add_prefix_space", pre(1, "add_prefix_space", true)},
		{"NFKC", `normalizer type "NFKC"`, set("normalizer", map[string]any{"type": "NFKC"})},
		{"unigram", `model type "Unigram"`, set("model.type", "Unigram")},
		{"byte fallback", "byte_fallback", set("model.byte_fallback", true)},
		{"dropout", "dropout", set("model.dropout", 0.1)},
		{"missing byte", "no token for byte", func(f map[string]any) {
			delete(f["model"].(map[string]any)["vocab"].(map[string]any), "a")
		}},
		{"lstrip", "lstrip", func(f map[string]any) { f["added_tokens"].([]any)[0].(map[string]any)["lstrip"] = true }},
		{"bert", `post_processor type "BertProcessing"`, set("post_processor", map[string]any{"type": "BertProcessing"})},
		{"metaspace", `pre_tokenizer type "Metaspace"`, set("pre_tokenizer", map[string]any{"type": "Metaspace"})},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := tinyFile()
			c.edit(f)
			_, err := parseTiny(t, f, nil)
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("err = %v, want ErrUnsupported", err)
			}
			if !strings.Contains(err.Error(), "tiny/tokenizer.json") || !strings.Contains(err.Error(), c.construct) {
				t.Fatalf("error %q does not name the file and %q", err, c.construct)
			}
		})
	}
}

// TestLlamaClassRebuildsBOS: the tokenizer classes that rebuild the post-processor take BOS and
// EOS from tokenizer_config.json whatever tokenizer.json says.
func TestLlamaClassRebuildsBOS(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  map[string]any
		want []uint32
	}{
		{"default adds bos", map[string]any{"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<|x|>"}, []uint32{300, 257}},
		{"object form", map[string]any{"tokenizer_class": "LlamaTokenizerFast", "bos_token": map[string]any{"content": "<|x|>"}}, []uint32{300, 257}},
		{"bos off eos on", map[string]any{"tokenizer_class": "GemmaTokenizerFast", "add_bos_token": false, "add_eos_token": true, "eos_token": "<|x|>"}, []uint32{257, 300}},
		{"other class ignores flags", map[string]any{"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": true, "bos_token": "<|x|>"}, []uint32{257}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tk, err := parseTiny(t, tinyFile(), c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := tk.Encode("hel", true)
			if !slices.Equal(got, c.want) {
				t.Fatalf("got %v want %v", got, c.want)
			}
			plain, _ := tk.Encode("hel", false)
			if !slices.Equal(plain, []uint32{257}) {
				t.Fatalf("without special tokens: %v", plain)
			}
		})
	}
	_, err := parseTiny(t, tinyFile(), map[string]any{"tokenizer_class": "LlamaTokenizerFast"})
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Llama class without bos_token: %v", err)
	}
}

// TestBOSTemplate is Llama-3 with the official file's TemplateProcessing, against goldens made
// with the same edit.
func TestBOSTemplate(t *testing.T) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(readGz(t, "testdata/llama3/tokenizer.json.gz"), &f); err != nil {
		t.Fatal(err)
	}
	pp, err := os.ReadFile("testdata/llama3/bos_template.json")
	if err != nil {
		t.Fatal(err)
	}
	f["post_processor"] = pp
	data, _ := json.Marshal(f)
	tk, err := Parse("llama3-bos/tokenizer.json", data, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	gs := readGoldenFile(t, filepath.Join("testdata", "llama3", "bos_template_goldens.jsonl.gz"))
	for i, g := range gs {
		if g.IDs[0] != 128000 {
			t.Fatalf("golden %d lacks BOS", i)
		}
		got, _ := tk.Encode(g.Text, true)
		plain, _ := tk.Encode(g.Text, false)
		if !slices.Equal(got, g.IDs) || !slices.Equal(plain, g.IDsPlain) {
			t.Fatalf("case %d %s: got %v / %v", i, clip(g.Text), got, plain)
		}
	}
}

// TestHeapMatchesSmall: the two merge loops agree on every word of the corpus and on long runs.
func TestHeapMatchesSmall(t *testing.T) {
	tk := loadModel(t, "qwen3")
	words := []string{strings.Repeat("a", 100), strings.Repeat("ab", 80), strings.Repeat("hello", 30)}
	for _, g := range readTextGoldens(t, "qwen3")[:1000] {
		for s := g.Text; len(s) > 0; {
			n := tk.split.next(s)
			if n > 1 && n <= 64 {
				words = append(words, s[:n])
			}
			s = s[n:]
		}
	}
	for _, w := range words {
		a := tk.model.mergeHeap(nil, w)
		var b []uint32
		if len(w) <= 64 {
			b = tk.model.mergeSmall(nil, w)
		} else {
			b = tk.model.mergeHeap(nil, w)
		}
		if !slices.Equal(a, b) {
			t.Fatalf("%q: heap %v small %v", w, a, b)
		}
	}
}
