package enginetok

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/openai"
)

// vllm serves /tokenize in vLLM's shape: {count, max_model_len, tokens}; it records the last
// request body.
type vllm struct {
	mu    sync.Mutex // calls may overlap (TestClientBounds)
	last  map[string]any
	raw   string
	block chan struct{} // when set, a call waits for it (or its context)
}

func (v *vllm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	if v.block != nil {
		select {
		case <-v.block:
		case <-r.Context().Done():
			return
		}
	}
	b, _ := io.ReadAll(r.Body)
	var req map[string]any
	json.Unmarshal(b, &req)
	v.mu.Lock()
	v.raw, v.last = string(b), req
	v.mu.Unlock()
	toks := []int{101, 102, 103}
	if _, chat := req["messages"]; chat {
		toks = []int{7, 8}
	}
	json.NewEncoder(w).Encode(map[string]any{"count": len(toks), "max_model_len": 4096, "tokens": toks})
}

func TestClient(t *testing.T) {
	v := &vllm{}
	srv := httptest.NewServer(v)
	defer srv.Close()
	c, err := New(Config{Endpoint: srv.URL, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	ids, err := c.Text(context.Background(), "hi", false)
	if err != nil || !slices.Equal(ids, []uint32{101, 102, 103}) || v.last["prompt"] != "hi" || v.last["add_special_tokens"] != false || v.last["model"] != "m" {
		t.Fatalf("Text = %v %v; request %v", ids, err, v.last)
	}
	req, err := openai.Parse([]byte(`{"model": "m", "messages": [{"role": "user", "content": "x", "name": "a"}], "tools": [{"z": 1, "a": 2}], "chat_template_kwargs": {"enable_thinking": false}}`), openai.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	ids, err = c.Chat(context.Background(), req)
	if err != nil || !slices.Equal(ids, []uint32{7, 8}) || v.last["add_generation_prompt"] != true {
		t.Fatalf("Chat = %v %v; request %v", ids, err, v.last)
	}
	if !strings.Contains(v.raw, `"messages":[{"role":"user","content":"x","name":"a"}]`) || !strings.Contains(v.raw, `"tools":[{"z":1,"a":2}]`) || !strings.Contains(v.raw, `"chat_template_kwargs":{"enable_thinking":false}`) {
		t.Fatalf("the body's objects were not forwarded in order: %s", v.raw)
	}
}

func TestClientRefusals(t *testing.T) {
	for _, c := range []struct {
		name, want string
		h          http.HandlerFunc
	}{
		{"404", "404", http.NotFound},
		{"refused", "400", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, `{"error": "bad model"}`, 400) }},
		{"not json", "not /tokenize's JSON", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "<html>") }},
		{"empty", "not /tokenize's shape", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"count": 0, "tokens": []}`) }},
		{"count", "not /tokenize's shape", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"count": 3, "tokens": [1]}`) }},
		{"render only", "404", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/completions/render" {
				io.WriteString(w, `[1]`)
				return
			}
			http.NotFound(w, r)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.h)
			defer srv.Close()
			cl, _ := New(Config{Endpoint: srv.URL, Model: "m"})
			err := cl.Check(context.Background())
			if !errors.Is(err, ErrEngine) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), srv.URL+"/tokenize") {
				t.Fatalf("Check: %v; want ErrEngine naming the URL and %q", err, c.want)
			}
		})
	}
	if _, err := New(Config{Endpoint: "vllm:8000", Model: "m"}); err == nil {
		t.Fatal("an endpoint without a scheme accepted")
	}
}

// TestClientBounds: a call past its timeout fails, and calls beyond MaxConcurrent wait for a
// slot within their timeout.
func TestClientBounds(t *testing.T) {
	v := &vllm{block: make(chan struct{})}
	srv := httptest.NewServer(v)
	defer srv.Close()
	defer close(v.block)
	c, _ := New(Config{Endpoint: srv.URL, Model: "m", MaxConcurrent: 1, Timeout: 200 * time.Millisecond})
	first := make(chan error, 1)
	go func() { _, err := c.Text(context.Background(), "a", true); first <- err }()
	_, err := c.Text(context.Background(), "b", true)
	if !errors.Is(err, ErrEngine) {
		t.Fatalf("second call: %v; want a timeout error", err)
	}
	if err := <-first; !errors.Is(err, ErrEngine) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("blocked call: %v; want its deadline", err)
	}
}
