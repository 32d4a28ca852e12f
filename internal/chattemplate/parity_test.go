package chattemplate

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/openai"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// The goldens and tokenizer files are the tokenizer package's (testdata/gen/gen.js renders the
// conversations with @huggingface/jinja and encodes them with the Rust tokenizers library).
var modelsDir = filepath.Join("..", "tokenizer", "testdata")

func gunzip(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type chatGolden struct {
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	ContinueFinal       bool            `json:"continue_final_message"`
	Kwargs              json.RawMessage `json:"kwargs"`
	Rendered            string          `json:"rendered"`
	IDs                 []uint32        `json:"ids"`
}

// TestParityChat renders every golden conversation through the openai body parser (as a
// /v1/chat/completions body) and the template, and compares the text and its ids.
func TestParityChat(t *testing.T) {
	for _, m := range []string{"qwen3", "llama3"} {
		t.Run(m, func(t *testing.T) {
			cfg := gunzip(t, filepath.Join(modelsDir, m, "tokenizer_config.json.gz"))
			tmpl, err := FromConfig(m+"/tokenizer_config.json", cfg)
			if err != nil {
				t.Fatal(err)
			}
			tk, err := tokenizer.Parse(m+"/tokenizer.json", gunzip(t, filepath.Join(modelsDir, m, "tokenizer.json.gz")), "", cfg)
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(bytes.NewReader(gunzip(t, filepath.Join(modelsDir, m, "chat_goldens.jsonl.gz"))))
			sc.Buffer(nil, 1<<20)
			n, prefills := 0, 0
			for sc.Scan() {
				var g chatGolden
				if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
					t.Fatal(err)
				}
				body := map[string]any{"model": m, "messages": g.Messages, "add_generation_prompt": g.AddGenerationPrompt}
				if g.Tools != nil {
					body["tools"] = g.Tools
				}
				if g.Kwargs != nil {
					body["chat_template_kwargs"] = g.Kwargs
				}
				if g.ContinueFinal {
					body["continue_final_message"] = true
					prefills++
				}
				b, _ := json.Marshal(body)
				req, err := openai.Parse(b, openai.DefaultLimits())
				if err != nil {
					t.Fatal(err)
				}
				got, err := tmpl.Render(Input{Messages: req.Messages, Tools: req.Tools,
					AddGenerationPrompt: *req.AddGenerationPrompt, Kwargs: req.ChatTemplateKwargs,
					ContinueFinalMessage: req.ContinueFinalMessage})
				if err != nil {
					t.Fatalf("case %d: %v", n, err)
				}
				if got != g.Rendered {
					t.Fatalf("case %d rendered:\n%q\nwant\n%q", n, got, g.Rendered)
				}
				ids, err := tk.Encode(got, false)
				if err != nil || !slices.Equal(ids, g.IDs) {
					t.Fatalf("case %d ids %v (%v), want %v", n, ids, err, g.IDs)
				}
				n++
			}
			if n < 50 || prefills == 0 {
				t.Fatalf("%d conversations (%d continuing the final message), want at least 50 and some", n, prefills)
			}
			t.Logf("%s: %d conversations equal (%d continuing the final message)", m, n, prefills)
		})
	}
}

// TestRefuseAtLoad: a template that does not compile, or that fails on a plain conversation, is
// refused when loaded; a config without a template says so.
func TestRefuseAtLoad(t *testing.T) {
	for _, src := range []string{
		"{% for m in messages %}{{ m.content }",           // does not compile
		"{{ raise_exception('no plain conversations') }}", // fails on every conversation
		"{% for m in messages %}{{ m.content | nosuchfilter }}{% endfor %}",
	} {
		if _, err := Parse("bad.jinja", src, nil); err == nil || !strings.Contains(err.Error(), "bad.jinja") {
			t.Errorf("%q: err = %v, want a refusal naming the file", src, err)
		}
	}
	if _, err := FromConfig("x/tokenizer_config.json", []byte(`{"bos_token": "<s>"}`)); !errors.Is(err, ErrNoTemplate) {
		t.Fatalf("no template: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	tm, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tm.Render(probes[0])
	if err != nil || out != "[user]Hello" {
		t.Fatalf("chat_template.jinja: %q %v", out, err)
	}
}
