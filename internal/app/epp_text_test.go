package app

import (
	"context"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// TestEPPChatBodyTokenized: a /v1/chat/completions body through the
// endpoint picker is tokenized with the model's real tokenizer and chat
// template, exactly as the Tokenize RPC renders it: the worker the picker
// chose is then predicted to hold every full block of the hashes Tokenize
// gives for the same body, and no other worker holds any.
func TestEPPChatBodyTokenized(t *testing.T) {
	cfg, _ := testConfig(t)
	cfg.EPP.Addr = "127.0.0.1:0"
	cfg.Models = ModelConfigs{{Name: "qwen3", Tokenizer: qwen3Dir(t)}}
	cfg.Workers = []WorkerConfig{
		{WorkerID: "a", Model: "qwen3", Endpoint: "10.1.0.1:8000"},
		{WorkerID: "b", Model: "qwen3", Endpoint: "10.1.0.2:8000"},
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	dial := func(addr string) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	main, picker := dial(a.GRPCAddr()), dial(a.EPPAddr())
	waitServing(t, main)

	body := `{"model":"qwen3","messages":[{"role":"system","content":"` + strings.Repeat("You are a careful assistant. ", 40) +
		`"},{"role":"user","content":"Summarise the history of the printing press."}]}`
	sctx, scancel := context.WithTimeout(ctx, time.Minute) // bounds a failed test only
	defer scancel()
	s, err := extprocv3.NewExternalProcessorClient(picker).Process(sctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/chat/completions")}}}}}})
	s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}})
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var dest string
	for _, o := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			dest = string(o.GetHeader().GetRawValue())
		}
	}
	chosen := map[string]string{"10.1.0.1:8000": "a", "10.1.0.2:8000": "b"}[dest]
	if chosen == "" {
		t.Fatalf("picked %q, want a worker's endpoint (%v)", dest, r)
	}

	rc := kvrouterv1.NewRouterClient(main)
	tok, err := rc.Tokenize(ctx, &kvrouterv1.TokenizeRequest{Prompt: &kvrouterv1.Prompt{OpenaiBody: []byte(body)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.BlockHashes) < 10 {
		t.Fatalf("Tokenize gave %d blocks for a long system prompt", len(tok.BlockHashes))
	}
	sc, err := rc.Score(ctx, &kvrouterv1.ScoreRequest{Prompt: &kvrouterv1.Prompt{Model: "qwen3", BlockHashes: tok.BlockHashes}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ws := range sc.Scores {
		want := uint32(0)
		if ws.WorkerId == chosen {
			want = uint32(len(tok.BlockHashes))
		}
		if ws.MatchedBlocks != want {
			t.Errorf("worker %s matches %d of the %d blocks Tokenize hashed, want %d", ws.WorkerId, ws.MatchedBlocks, len(tok.BlockHashes), want)
		}
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
}
