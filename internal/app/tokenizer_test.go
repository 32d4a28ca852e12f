package app

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/enginetok"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
	"github.com/kvrouter/kvrouter/internal/tokenizer/tokentest"
)

// qwen3Dir is the real Qwen3 tokenizer files laid out as a user's model directory.
func qwen3Dir(t *testing.T) string { return tokentest.Dir(t, "qwen3") }

func TestModelConfig(t *testing.T) {
	cfg := DefaultConfig()
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("models:\n  - name: qwen\n    tokenizer: /models/qwen\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cfg.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--model", "llama=/models/llama"}); err != nil {
		t.Fatal(err)
	}
	want := ModelConfigs{{Name: "qwen", Tokenizer: "/models/qwen"}, {Name: "llama", Tokenizer: "/models/llama"}}
	if len(cfg.Models) != 2 || cfg.Models[0] != want[0] || cfg.Models[1] != want[1] {
		t.Fatalf("models %v, want %v", cfg.Models, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--model", "nodir"}); err == nil {
		t.Fatal("--model without =DIR accepted")
	}
	cfg.Models = append(cfg.Models, ModelConfig{Name: "qwen", Tokenizer: "/x"})
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `"qwen" is listed twice`) {
		t.Fatalf("duplicate model: %v", err)
	}
}

// TestAppTokenizer: a configured model's files are loaded at start and serve Tokenize; files it
// cannot load exactly stop New, naming the file.
func TestAppTokenizer(t *testing.T) {
	cfg, log := testConfig(t)
	cfg.Models = ModelConfigs{{Name: "qwen3", Tokenizer: qwen3Dir(t)}}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	cc, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	waitServing(t, cc)
	resp, err := kvrouterv1.NewRouterClient(cc).Tokenize(ctx, &kvrouterv1.TokenizeRequest{Prompt: &kvrouterv1.Prompt{
		OpenaiBody: []byte(`{"model": "qwen3", "messages": [{"role": "user", "content": "Hello"}]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.Rendered, "<|im_start|>user\nHello<|im_end|>") || len(resp.TokenIds) == 0 || resp.TokenIds[0] != 151644 {
		t.Fatalf("Tokenize = %v", resp)
	}
	if !strings.Contains(log.String(), "tokenizer loaded") {
		t.Fatalf("no load line in the log:\n%s", log)
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}

	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "tokenizer.json"), []byte(`{"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "Unigram"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg2, _ := testConfig(t)
	cfg2.Models = ModelConfigs{{Name: "x", Tokenizer: bad}}
	_, err = New(cfg2)
	if !errors.Is(err, tokenizer.ErrUnsupported) || !strings.Contains(err.Error(), filepath.Join(bad, "tokenizer.json")) || !strings.Contains(err.Error(), "Metaspace") {
		t.Fatalf("New with an unsupported tokenizer: %v", err)
	}

	tmplDir := qwen3Dir(t)
	if err := os.WriteFile(filepath.Join(tmplDir, "chat_template.jinja"), []byte("{{ raise_exception('no') }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg3, _ := testConfig(t)
	cfg3.Models = ModelConfigs{{Name: "x", Tokenizer: tmplDir}}
	if _, err = New(cfg3); err == nil || !strings.Contains(err.Error(), "chat_template.jinja") {
		t.Fatalf("New with an unrenderable template: %v", err)
	}

	// An engine whose /tokenize answers 404 stops the start.
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	cfg4, _ := testConfig(t)
	cfg4.Models = ModelConfigs{{Name: "x", TokenizerEndpoint: notFound.URL}}
	if _, err = New(cfg4); !errors.Is(err, enginetok.ErrEngine) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("New with an engine answering 404: %v", err)
	}
}
