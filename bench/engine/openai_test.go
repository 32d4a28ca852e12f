package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recBackend serves every job at once, recording it.
type recBackend struct {
	mu   sync.Mutex
	jobs []Job
	err  error
}

func (b *recBackend) Serve(_ context.Context, j *Job, first func()) error {
	b.mu.Lock()
	b.jobs = append(b.jobs, *j)
	b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	first()
	return nil
}

// wordTokenizer gives each word its length as a token id, and a chat its
// messages' contents so.
type wordTokenizer struct{}

func (wordTokenizer) CompletionTokens(_, prompt string) ([]uint32, error) {
	var out []uint32
	for _, w := range strings.Fields(prompt) {
		out = append(out, uint32(len(w)))
	}
	return out, nil
}

func (t wordTokenizer) ChatTokens(body []byte) ([]uint32, error) {
	var b struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, err
	}
	var out []uint32
	for _, m := range b.Messages {
		ids, _ := t.CompletionTokens("", m.Content)
		out = append(out, ids...)
	}
	return out, nil
}

func post(t *testing.T, h http.Handler, path, body string, hdr ...string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(b)
}

func TestOpenAIFrontRequests(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tokenizer bool
		path      string
		body      string
		hdr       []string
		status    int
		rank      int
		tokens    []uint32
		chat      bool
		maxTokens int
	}{
		{name: "token ids", path: "/v1/completions", body: `{"model":"m","prompt":[5,6,7],"max_tokens":3}`,
			status: 200, tokens: []uint32{5, 6, 7}, maxTokens: 3},
		{name: "one list of token ids", path: "/v1/completions", body: `{"model":"m","prompt":[[5,6]]}`,
			status: 200, tokens: []uint32{5, 6}, maxTokens: 16},
		{name: "a batch", path: "/v1/completions", body: `{"model":"m","prompt":[[5],[6]]}`, status: 400},
		{name: "text without a tokenizer", path: "/v1/completions", body: `{"model":"m","prompt":"a bb"}`, status: 400},
		{name: "text", tokenizer: true, path: "/v1/completions", body: `{"model":"m","prompt":"a bb ccc"}`,
			status: 200, tokens: []uint32{1, 2, 3}, maxTokens: 16},
		{name: "chat without a tokenizer", path: "/v1/chat/completions",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, status: 400},
		{name: "chat", tokenizer: true, path: "/v1/chat/completions",
			body:   `{"model":"m","messages":[{"role":"user","content":"hi there"}],"max_completion_tokens":2}`,
			status: 200, tokens: []uint32{2, 5}, chat: true, maxTokens: 2},
		{name: "rank header", path: "/v1/completions", body: `{"model":"m","prompt":[1]}`, hdr: []string{RankHeader, "1"},
			status: 200, rank: 1, tokens: []uint32{1}, maxTokens: 16},
		{name: "rank out of range", path: "/v1/completions", body: `{"model":"m","prompt":[1]}`, hdr: []string{RankHeader, "2"}, status: 400},
		{name: "no model", path: "/v1/completions", body: `{"prompt":[1]}`, status: 400},
		{name: "malformed", path: "/v1/completions", body: `{"model":`, status: 400},
		{name: "empty prompt", path: "/v1/completions", body: `{"model":"m","prompt":[]}`, status: 400},
		{name: "zero max_tokens", path: "/v1/completions", body: `{"model":"m","prompt":[1],"max_tokens":0}`, status: 400},
		{name: "max_tokens over the limit", path: "/v1/completions", body: `{"model":"m","prompt":[1],"max_tokens":1000000000}`, status: 400},
		{name: "too large", path: "/v1/completions", body: `{"model":"m","prompt":[` + strings.Repeat("1,", 600) + `1]}`, status: 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ranks := []*recBackend{{}, {}}
			cfg := OpenAIConfig{Ranks: []Backend{ranks[0], ranks[1]}, MaxBodyBytes: 1024}
			if tc.tokenizer {
				cfg.Tokenizer = wordTokenizer{}
			}
			s, err := NewOpenAIServer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			status, body := post(t, s.Handler(0), tc.path, tc.body, tc.hdr...)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			n := len(ranks[0].jobs) + len(ranks[1].jobs)
			if status != 200 {
				if n != 0 || !strings.Contains(body, `"error"`) {
					t.Fatalf("refused request reached a backend (%d) or has no error body: %s", n, body)
				}
				return
			}
			if n != 1 || len(ranks[tc.rank].jobs) != 1 {
				t.Fatalf("jobs per rank %d/%d, want one on rank %d", len(ranks[0].jobs), len(ranks[1].jobs), tc.rank)
			}
			j := ranks[tc.rank].jobs[0]
			if !slices.Equal(j.Tokens, tc.tokens) || j.Chat != tc.chat || j.MaxTokens != tc.maxTokens || j.Rank != tc.rank {
				t.Fatalf("job %+v, want tokens %v chat %v max tokens %d", j, tc.tokens, tc.chat, tc.maxTokens)
			}
		})
	}
}

// sseData is the data lines of an SSE body.
func sseData(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestOpenAIFrontStreaming(t *testing.T) {
	s, err := NewOpenAIServer(OpenAIConfig{Ranks: []Backend{&recBackend{}}, Tokenizer: wordTokenizer{}})
	if err != nil {
		t.Fatal(err)
	}
	_, body := post(t, s.Handler(0), "/v1/completions",
		`{"model":"m","prompt":[1,2],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`)
	ev := sseData(body)
	want := []string{
		`"finish_reason":null,"index":0,"logprobs":null,"text":" tok"}`,
		`"finish_reason":null,"index":0,"logprobs":null,"text":" tok tok"}`,
		`"finish_reason":"length","index":0,"logprobs":null,"text":""}`,
		`"usage":{"completion_tokens":3,"prompt_tokens":2,"total_tokens":5}`,
		`[DONE]`,
	}
	if len(ev) != len(want) {
		t.Fatalf("events %q", ev)
	}
	for i, w := range want {
		if !strings.Contains(ev[i], w) {
			t.Fatalf("event %d %q lacks %q", i, ev[i], w)
		}
	}
	_, body = post(t, s.Handler(0), "/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1,"stream":true}`)
	ev = sseData(body)
	if len(ev) != 3 || !strings.Contains(ev[0], `"delta":{"content":" tok","role":"assistant"}`) ||
		!strings.Contains(ev[0], `"object":"chat.completion.chunk"`) || ev[2] != "[DONE]" {
		t.Fatalf("chat events %q", ev)
	}
	_, body = post(t, s.Handler(0), "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":2}`)
	if !strings.Contains(body, `"message":{"content":" tok tok","role":"assistant"}`) {
		t.Fatalf("chat response %s", body)
	}
}

func TestOpenAIFrontBackendRefuses(t *testing.T) {
	s, err := NewOpenAIServer(OpenAIConfig{Ranks: []Backend{&recBackend{err: fmt.Errorf("engine: %w", ErrTooLong)}}})
	if err != nil {
		t.Fatal(err)
	}
	if status, body := post(t, s.Handler(0), "/v1/completions", `{"model":"m","prompt":[1]}`); status != 400 {
		t.Fatalf("status %d: %s", status, body)
	}
	_, body := post(t, s.Handler(0), "/v1/completions", `{"model":"m","prompt":[1],"stream":true}`)
	if ev := sseData(body); len(ev) != 2 || !strings.Contains(ev[0], `"error"`) || ev[1] != "[DONE]" {
		t.Fatalf("streamed refusal %q: want an error event and [DONE]", ev)
	}
}

// TestTimedBackend: an old-model engine behind the front publishes the
// request's blocks and caches them for the next request.
func TestTimedBackend(t *testing.T) {
	e, err := New(Config{ID: "e", CapacityBlocks: 100, PrefillPerToken: time.Millisecond, DecodePerToken: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s, err := NewOpenAIServer(OpenAIConfig{Ranks: []Backend{&Timed{Engine: e, T0: time.Now(), SpeedUp: 1000}}})
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.TrimSuffix(strings.Repeat("3,", 32), ",")
	for i := 0; i < 2; i++ {
		if status, body := post(t, s.Handler(0), "/v1/completions", `{"model":"m","prompt":[`+ids+`],"max_tokens":2}`); status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
	}
	st := e.Stats()
	if st.Requests != 2 || st.CachedBlocks != 2 || st.Batches != 1 {
		t.Fatalf("stats %+v: want the second request's 2 blocks cached, one batch published", st)
	}
}
