package textgen

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/bench/trace"
	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/openai"
)

func loadLexicon(t *testing.T, name string) *Lexicon {
	t.Helper()
	dir, cleanup, err := Dir(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	l, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// randomRequests draws requests whose blocks repeat (shared prefixes) and whose last block is cut.
func randomRequests(rng *rand.Rand, n, blockTokens int) []trace.Request {
	reqs := make([]trace.Request, n)
	for i := range reqs {
		k := 1 + rng.IntN(8)
		ids := make([]uint64, k)
		for j := range ids {
			ids[j] = uint64(rng.IntN(400)) // few ids: many blocks recur in other contexts
		}
		reqs[i] = trace.Request{
			InputLength: (k-1)*blockTokens + 1 + rng.IntN(blockTokens),
			HashIDs:     ids, BlockTokens: blockTokens, OutputLength: 1,
		}
	}
	return reqs
}

// TestTextEncodesToTokens: the text of every request encodes to exactly the request's tokens
// with the real tokenizer, and with special tokens added to the post-processor's BOS/EOS around
// them, for both committed tokenizers.
func TestTextEncodesToTokens(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			l := loadLexicon(t, name)
			t.Logf("%s: %d words", name, l.Len())
			prefix, err := l.Tokenizer().Encode("", true)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			blocks := 0
			for _, r := range randomRequests(rng, 300, 64) {
				blocks += len(r.HashIDs)
				want := l.Tokens(r, nil)
				if len(want) != r.InputLength {
					t.Fatalf("%d tokens for input length %d", len(want), r.InputLength)
				}
				text := l.Text(r)
				got, err := l.Tokenizer().Encode(text, false)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("ids %v: text %.80q... encodes to %d tokens, want %d (first difference at %d)",
						r.HashIDs, text, len(got), len(want), firstDiff(got, want))
				}
				got, err = l.Tokenizer().Encode(text, true)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, append(slices.Clone(prefix), want...)) {
					t.Fatalf("with special tokens: %d tokens, want prefix %v and %d", len(got), prefix, len(want))
				}
			}
			if blocks < 1000 {
				t.Fatalf("only %d blocks checked", blocks)
			}
		})
	}
}

// TestEqualBlocksEqualText: the same hash id gives the same text wherever it appears, and
// different ids differ, so the text keeps the trace's prefix structure.
func TestEqualBlocksEqualText(t *testing.T) {
	l := loadLexicon(t, "qwen3")
	a := l.Text(trace.Request{InputLength: 32, HashIDs: []uint64{7, 9}, BlockTokens: 16})
	b := l.Text(trace.Request{InputLength: 40, HashIDs: []uint64{7, 9, 11}, BlockTokens: 16})
	c := l.Text(trace.Request{InputLength: 32, HashIDs: []uint64{7, 10}, BlockTokens: 16})
	if b[:len(a)] != a {
		t.Fatal("a request's text is not a prefix of the text of a request extending its blocks")
	}
	if a == c {
		t.Fatal("different blocks gave the same text")
	}
}

func TestDirErrors(t *testing.T) {
	if _, _, err := Dir(t.TempDir()); !errors.Is(err, ErrNoTokenizer) {
		t.Fatalf("empty dir: %v, want ErrNoTokenizer", err)
	}
}

func firstDiff(a, b []uint32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestChatBodyKeepsBlocks: a chat body of a request, rendered by the real Qwen3 chat template
// and encoded as the engine does, holds the request's tokens contiguously after the template's
// header, so every block of the trace stays a run of equal tokens.
func TestChatBodyKeepsBlocks(t *testing.T) {
	dir, cleanup, err := Dir("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	l, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattemplate.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, r := range randomRequests(rng, 50, 32) {
		body := l.Prompt(FormChat, "m", r)
		req, err := openai.Parse(body, openai.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		text, err := tmpl.Render(chattemplate.Input{Messages: req.Messages, AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Tokenizer().Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		want := l.Tokens(r, nil)
		const header = 3 // <|im_start|> user \n
		if len(got) < header+len(want) || !slices.Equal(got[header:header+len(want)], want) {
			t.Fatalf("rendered chat %.60q... does not hold the request's %d tokens after the header", text, len(want))
		}
	}
	for _, f := range []Form{FormText, FormCompletions} {
		r := trace.Request{InputLength: 20, HashIDs: []uint64{1, 2}, BlockTokens: 16}
		p := l.Prompt(f, "m", r)
		if f == FormText && string(p) != l.Text(r) {
			t.Fatal("text form is not the text")
		}
		if f == FormCompletions {
			req, err := openai.Parse(p, openai.DefaultLimits())
			if err != nil || req.Prompt != l.Text(r) || req.Model != "m" {
				t.Fatalf("completions body %s: %v", p, err)
			}
		}
	}
	if _, err := ParseForm("html"); err == nil {
		t.Fatal("unknown form accepted")
	}
}
