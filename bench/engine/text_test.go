package engine

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/shamaton/msgpack/v2"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
	"github.com/kvrouter/kvrouter/internal/tokenizer/tokentest"
)

// qwen3 loads the real Qwen3 tokenizer committed gzipped in the tokenizer package's testdata.
func qwen3(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(qwen3Files(t))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// qwen3Files writes the Qwen3 tokenizer files, ungzipped, to a directory.
func qwen3Files(t *testing.T) string { return tokentest.Dir(t, "qwen3") }

// TestServeTextAnnouncesOwnTokens: an engine given text stores and announces over ZMQ the blocks
// of its own tokenization of it (the real Qwen3 tokenizer's ids), not anything the caller computed.
func TestServeTextAnnouncesOwnTokens(t *testing.T) {
	tok := qwen3(t)
	e := newTestEngine(t, Config{ID: "e", BlockSize: 4, CapacityBlocks: 64, Tokenizer: tok})
	sub := subscriber(t, e)
	text := "Hello, world! The quick brown fox jumps over the lazy dog; 12345 ümlaut 漢字 and more words."
	want, err := tok.Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.ServeTextAndPublish(text, 3)
	if err != nil {
		t.Fatal(err)
	}
	full := len(want) / 4 * 4
	if len(r.Events) != 1 || !slices.Equal(r.Events[0].Tokens, want[:full]) {
		t.Fatalf("stored events %+v, want one event of tokens %v", r.Events, want[:full])
	}
	if !slices.Equal(r.Events[0].Hashes, e.BlockHashes(want[:full], nil)) {
		t.Fatal("stored hashes are not the engine's hashes of its tokens")
	}
	m := recvWithin(t, sub)
	var batch any
	if err := msgpack.Unmarshal(m.Frames[2], &batch); err != nil {
		t.Fatal(err)
	}
	if got := decodeEvents(t, FormatVLLMMap, batch.([]any)[1].([]any)); !reflect.DeepEqual(got, r.Events) {
		t.Fatalf("announced %+v, want %+v", got, r.Events)
	}
	// The same text again hits every full block: the engine tokenizes deterministically.
	r2, err := e.ServeTextAndPublish(text, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r2.CachedBlocks != full/4 {
		t.Fatalf("second serve cached %d blocks, want %d", r2.CachedBlocks, full/4)
	}
}

func TestTokenizeWithoutTokenizer(t *testing.T) {
	e := newTestEngine(t, Config{ID: "e", CapacityBlocks: 4})
	if _, err := e.Tokenize("hi"); !errors.Is(err, ErrNoTextTokenizer) {
		t.Fatalf("got %v, want ErrNoTextTokenizer", err)
	}
	if _, err := newTestEngine(t, Config{ID: "f", CapacityBlocks: 4, Tokenizer: qwen3(t)}).Tokenize("\xff"); !errors.Is(err, tokenizer.ErrInvalidUTF8) {
		t.Fatalf("invalid UTF-8: got %v", err)
	}
}

// TestTextTokenizerBodies: bodies are tokenized as vLLM does: a completion body like its text
// with special tokens, a chat through the template (Qwen3's header tokens first), and a chat
// without a template or a completion given to ChatTokens refused with their errors.
func TestTextTokenizerBodies(t *testing.T) {
	files := qwen3Files(t)
	tok, err := tokenizer.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	tt := &TextTokenizer{Tokenizer: tok}
	want, err := tok.Encode(" hello world", true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tt.BodyTokens([]byte(`{"model":"m","prompt":" hello world"}`))
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("completion body: %v %v, want %v", got, err, want)
	}
	chat := []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`)
	if _, err := tt.ChatTokens(chat); !errors.Is(err, ErrNoChatTemplate) {
		t.Fatalf("chat without a template: %v", err)
	}
	if _, err := tt.ChatTokens([]byte(`{"model":"m","prompt":"x"}`)); !errors.Is(err, ErrNotChat) {
		t.Fatalf("completion body to ChatTokens: %v", err)
	}
	if tt.Template, err = chattemplate.Load(files); err != nil {
		t.Fatal(err)
	}
	got, err = tt.ChatTokens(chat)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := tok.TokenID("<|im_start|>")
	if len(got) < 4 || got[0] != start {
		t.Fatalf("chat tokens %v do not open with <|im_start|> (%d)", got, start)
	}
}
