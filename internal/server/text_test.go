package server

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"google.golang.org/grpc/codes"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
	"github.com/kvrouter/kvrouter/internal/tokenizer/tokentest"
)

var (
	qwen3Once sync.Once
	qwen3Tok  *tokenizer.Tokenizer
	qwen3Tmpl *chattemplate.Template
)

// qwen3 loads the real Qwen3 tokenizer files the tokenizer package's parity tests use, once for
// the package's tests (a Tokenizer is safe for concurrent use).
func qwen3(t testing.TB) (*tokenizer.Tokenizer, *chattemplate.Template) {
	t.Helper()
	qwen3Once.Do(func() { qwen3Tok, qwen3Tmpl = loadQwen3(t) })
	if qwen3Tok == nil {
		t.Fatal("loading the Qwen3 tokenizer failed")
	}
	return qwen3Tok, qwen3Tmpl
}

func loadQwen3(t testing.TB) (*tokenizer.Tokenizer, *chattemplate.Template) {
	t.Helper()
	read := func(name string) []byte { return tokentest.Read(t, "qwen3", name) }
	cfg := read("tokenizer_config.json")
	tk, err := tokenizer.Parse("qwen3/tokenizer.json", read("tokenizer.json"), "qwen3/tokenizer_config.json", cfg)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := chattemplate.FromConfig("qwen3/tokenizer_config.json", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tk, tm
}

// newTextEnv is newEnv with model "m" tokenized as Qwen3 and "plain" without a chat template.
func newTextEnv(t *testing.T) (*env, *tokenizer.Tokenizer, *chattemplate.Template) {
	t.Helper()
	e := newEnv(t)
	tk, tm := qwen3(t)
	if err := e.srv.SetText(TextConfig{BlockSize: blockSize, Models: []TextModel{
		{Name: "m", Tokenizer: tk, Template: tm}, {Name: "plain", Tokenizer: tk},
	}}); err != nil {
		t.Fatal(err)
	}
	return e, tk, tm
}

const longText = "The router sends each request to the engine whose KV cache holds the longest prefix " +
	"of its prompt. Engines publish what they store; the router keeps an index of it, and answers " +
	"the gateway in microseconds. 你好，世界 — 12345 tokens! "

// TestTokenizeText: Tokenize over gRPC returns the tokenizer's ids for a text prompt and hashes
// them as a token_ids prompt with the same ids.
func TestTokenizeText(t *testing.T) {
	e, tk, _ := newTextEnv(t)
	c := ctx(t)
	want, _ := tk.Encode(longText, true)
	got, err := e.router.Tokenize(c, &kvrouterv1.TokenizeRequest{Prompt: &kvrouterv1.Prompt{Model: "m", Text: longText, CacheSalt: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.TokenIds, want) || got.Tokenizer != "local" || got.Model != "m" || got.BlockSize != blockSize {
		t.Fatalf("Tokenize = %v; want ids %v", got, want)
	}
	byIDs, err := e.router.Tokenize(c, &kvrouterv1.TokenizeRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: want, CacheSalt: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.BlockHashes) != len(want)/blockSize || !slices.Equal(got.BlockHashes, byIDs.BlockHashes) || byIDs.Tokenizer != "none" {
		t.Fatalf("text hashes %v, token_ids hashes %v", got.BlockHashes, byIDs.BlockHashes)
	}
	if h := normalize.HashPrompt(normalize.Seed("", "s"), want, blockSize, nil, nil); !slices.Equal(h, got.BlockHashes) {
		t.Fatal("hashes differ from normalize.HashPrompt")
	}
}

// TestTokenizeChatBody: a chat body is rendered with the model's template (generation prompt
// added) and tokenized without adding special tokens; the body's flags win.
func TestTokenizeChatBody(t *testing.T) {
	e, tk, _ := newTextEnv(t)
	c := ctx(t)
	body := `{"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}],
		"chat_template_kwargs": {"enable_thinking": false}, "cache_salt": "tenant-1", "temperature": 0.2}`
	got, err := e.router.Tokenize(c, &kvrouterv1.TokenizeRequest{Prompt: &kvrouterv1.Prompt{OpenaiBody: []byte(body)}})
	if err != nil {
		t.Fatal(err)
	}
	wantText := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	if got.Rendered != wantText {
		t.Fatalf("rendered %q, want %q", got.Rendered, wantText)
	}
	want, _ := tk.Encode(wantText, false)
	if !slices.Equal(got.TokenIds, want) || got.Model != "m" {
		t.Fatalf("ids %v want %v", got.TokenIds, want)
	}
	salted := normalize.HashPrompt(normalize.Seed("", "tenant-1"), want, blockSize, nil, nil)
	if !slices.Equal(got.BlockHashes, salted) {
		t.Fatal("the body's cache_salt does not seed the hashes")
	}
	// add_generation_prompt false drops the assistant header.
	body2 := strings.Replace(body, `"temperature"`, `"add_generation_prompt": false, "temperature"`, 1)
	got2, err := e.router.Tokenize(c, &kvrouterv1.TokenizeRequest{Prompt: &kvrouterv1.Prompt{OpenaiBody: []byte(body2)}})
	if err != nil || strings.HasSuffix(got2.Rendered, "assistant\n") || !strings.HasPrefix(wantText, got2.Rendered) {
		t.Fatalf("add_generation_prompt false: %q %v", got2.GetRendered(), err)
	}
	// A completion body is tokenized as text; token ids are used as given.
	comp, err := e.router.Tokenize(c, &kvrouterv1.TokenizeRequest{Prompt: &kvrouterv1.Prompt{OpenaiBody: []byte(`{"model": "m", "prompt": "hello world"}`)}})
	if wantC, _ := tk.Encode("hello world", true); err != nil || !slices.Equal(comp.TokenIds, wantC) {
		t.Fatalf("completion body: %v %v", comp, err)
	}
	ids, err := e.router.Tokenize(c, &kvrouterv1.TokenizeRequest{Prompt: &kvrouterv1.Prompt{OpenaiBody: []byte(`{"model": "m", "prompt": [5, 6, 7]}`)}})
	if err != nil || !slices.Equal(ids.TokenIds, []uint32{5, 6, 7}) || ids.Tokenizer != "none" {
		t.Fatalf("token id body: %v %v", ids, err)
	}
}

func TestTextErrors(t *testing.T) {
	e, _, _ := newTextEnv(t)
	c := ctx(t)
	chat := func(model string) []byte {
		return []byte(fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "x"}]}`, model))
	}
	for _, tc := range []struct {
		name string
		p    *kvrouterv1.Prompt
		code codes.Code
		text string
	}{
		{"text and ids", &kvrouterv1.Prompt{Model: "m", Text: "x", TokenIds: []uint32{1}}, codes.InvalidArgument, "exactly one"},
		{"text and body", &kvrouterv1.Prompt{Model: "m", Text: "x", OpenaiBody: chat("m")}, codes.InvalidArgument, "both text and openai_body"},
		{"no model", &kvrouterv1.Prompt{Text: "x"}, codes.InvalidArgument, "prompt.model"},
		{"no tokenizer", &kvrouterv1.Prompt{Model: "other", Text: "x"}, codes.FailedPrecondition, `"other" has no tokenizer`},
		{"body field", &kvrouterv1.Prompt{OpenaiBody: []byte(`{"model": "m", "messages": [{"content": "x"}]}`)}, codes.InvalidArgument, "openai_body.messages[0].role"},
		{"body not json", &kvrouterv1.Prompt{OpenaiBody: []byte(`{"model"`)}, codes.InvalidArgument, "openai_body.body"},
		{"model mismatch", &kvrouterv1.Prompt{Model: "x", OpenaiBody: chat("m")}, codes.InvalidArgument, "differs"},
		{"no template", &kvrouterv1.Prompt{OpenaiBody: chat("plain")}, codes.FailedPrecondition, "no chat template"},
		{"mm items", &kvrouterv1.Prompt{Model: "m", Text: "x", MmItems: []*kvrouterv1.MultimodalItem{{Hash: "h", Length: 1}}}, codes.InvalidArgument, "mm_items"},
	} {
		_, err := e.router.Tokenize(c, &kvrouterv1.TokenizeRequest{Prompt: tc.p})
		wantCodeNamed(t, tc.name, err, tc.code, tc.text)
		_, err = e.router.Route(c, &kvrouterv1.RouteRequest{Prompt: tc.p})
		wantCodeNamed(t, tc.name+" (Route)", err, tc.code, tc.text)
	}
	// Without SetText, text prompts are refused clearly.
	plain := newEnv(t)
	_, err := plain.router.Route(c, &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", Text: "x"}})
	wantCode(t, err, codes.FailedPrecondition, "configure models")
}

func wantCodeNamed(t *testing.T, name string, err error, code codes.Code, text string) {
	t.Helper()
	if got := err; got == nil || !strings.Contains(got.Error(), text) || !strings.Contains(got.Error(), code.String()) {
		t.Errorf("%s: %v; want %v mentioning %q", name, err, code, text)
	}
}

// TestRouteTextMatchesEngineEvents: an engine stores a text prompt's blocks (its events carry
// the token ids the engine made); Score, Route and RouteStream given the text then match them,
// as a token_ids prompt does.
func TestRouteTextMatchesEngineEvents(t *testing.T) {
	e, tk, _ := newTextEnv(t)
	c := ctx(t)
	pub, port := listenPub(t)
	for _, w := range []*kvrouterv1.Worker{
		{WorkerId: "engine-a", Model: "m", Endpoint: "a:8000", KvEventsEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", port)},
		{WorkerId: "b", Model: "m", Endpoint: "b:8000"},
	} {
		if _, err := e.registry.RegisterWorker(c, &kvrouterv1.RegisterWorkerRequest{Worker: w}); err != nil {
			t.Fatal(err)
		}
	}
	toks, _ := tk.Encode(longText, true)
	if len(toks) < 3*blockSize {
		t.Fatalf("text has %d tokens, want 3 blocks", len(toks))
	}
	batch := storedBatch(t, []uint64{0xa1, 0xa2}, nil, toks[:2*blockSize])
	text := &kvrouterv1.Prompt{Model: "m", Text: longText}
	deadline := time.Now().Add(15 * time.Second)
	for seq := uint64(0); ; seq++ {
		if err := pub.Send(zmq4.NewMsgFrom([]byte{}, seqFrame(seq), batch)); err != nil {
			t.Fatal(err)
		}
		sr, err := e.router.Score(c, &kvrouterv1.ScoreRequest{Prompt: text})
		if err != nil {
			t.Fatal(err)
		}
		if sr.Scores[0].MatchedBlocks == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the text prompt never matched the engine's 2 blocks: %v", sr)
		}
		time.Sleep(20 * time.Millisecond) // publishing pace while the subscription connects, not synchronization
	}
	rr, err := e.router.Route(c, &kvrouterv1.RouteRequest{Prompt: text, RequestId: "r1"})
	if err != nil || rr.WorkerId != "engine-a" || rr.MatchedBlocks != 2 || rr.PromptBlocks != uint32(len(toks)/blockSize) {
		t.Fatalf("Route(text) = %v, %v", rr, err)
	}
	body := []byte(fmt.Sprintf(`{"model": "m", "prompt": %q}`, longText))
	st, err := e.router.RouteStream(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*kvrouterv1.Prompt{{OpenaiBody: body}, {Model: "m", TokenIds: toks}} {
		if err := st.Send(&kvrouterv1.RouteRequest{Prompt: p}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil || resp.Code != 0 || resp.Response.WorkerId != "engine-a" || resp.Response.MatchedBlocks != 2 {
			t.Fatalf("RouteStream = %v, %v", resp, err)
		}
	}
	st.CloseSend()
}
