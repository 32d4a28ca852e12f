package engine

import (
	"net/http"
	"testing"
)

// FuzzOpenAIFront: any body on either path is served (200) or refused with
// a client error, never a panic or a server error.
func FuzzOpenAIFront(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":[1,2,3],"max_tokens":2,"stream":true}`,
		`{"model":"m","prompt":[[1,2]]}`,
		`{"model":"m","prompt":"a b"}`,
		`{"model":"m","prompt":["a b"],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":1}`,
		`{"model":"m","prompt":[4294967296]}`,
		`{"model":"m","prompt":[-1]}`,
		`{"model":"m","max_tokens":-5,"prompt":[1]}`,
		`{"model":"m","max_tokens":1000000000,"prompt":[1]}`,
		`[]`, `null`, `{`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	s, err := NewOpenAIServer(OpenAIConfig{Ranks: []Backend{&recBackend{}}, Tokenizer: wordTokenizer{}, MaxBodyBytes: 4096, DefaultMaxTokens: 2})
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler(0)
	f.Fuzz(func(t *testing.T, body string, chat bool) {
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		status, out := post(t, h, path, body)
		if status != http.StatusOK && status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d for %q: %s", status, body, out)
		}
	})
}
