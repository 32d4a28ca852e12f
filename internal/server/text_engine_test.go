package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/enginetok"
)

// TestEngineTokenizer: a model tokenized by the engine's /tokenize (an HTTP server in vLLM's
// shape) gets the engine's ids; an engine that fails is counted and answered Unavailable.
func TestEngineTokenizer(t *testing.T) {
	var fail atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.NotFound(w, r)
			return
		}
		var req map[string]any
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &req)
		toks := []int{1, 2, 3}
		if _, chat := req["messages"]; chat {
			toks = []int{9, 9}
		}
		json.NewEncoder(w).Encode(map[string]any{"count": len(toks), "max_model_len": 100, "tokens": toks})
	}))
	defer srv.Close()
	e := newEnv(t)
	cl, err := enginetok.New(enginetok.Config{Endpoint: srv.URL, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.SetText(TextConfig{BlockSize: blockSize, Models: []TextModel{{Name: "m", Engine: cl}}}); err != nil {
		t.Fatal(err)
	}
	c := ctx(t)
	got, err := e.router.Tokenize(c, &kvrouterv1.TokenizeRequest{Prompt: &kvrouterv1.Prompt{Model: "m", Text: "hello"}})
	if err != nil || !slices.Equal(got.TokenIds, []uint32{1, 2, 3}) || got.Tokenizer != "engine" {
		t.Fatalf("Tokenize(text) = %v, %v", got, err)
	}
	got, err = e.router.Tokenize(c, &kvrouterv1.TokenizeRequest{Prompt: &kvrouterv1.Prompt{OpenaiBody: []byte(`{"model": "m", "messages": [{"role": "user", "content": "x"}]}`)}})
	if err != nil || !slices.Equal(got.TokenIds, []uint32{9, 9}) {
		t.Fatalf("Tokenize(chat) = %v, %v", got, err)
	}
	fail.Store(true)
	_, err = e.router.Tokenize(c, &kvrouterv1.TokenizeRequest{Prompt: &kvrouterv1.Prompt{Model: "m", Text: "hello"}})
	wantCode(t, err, codes.Unavailable, "404")
	if n := testutil.ToFloat64(e.srv.text.engineErr.WithLabelValues("m")); n != 1 {
		t.Fatalf("kvrouter_tokenizer_engine_errors_total = %v, want 1", n)
	}
}
