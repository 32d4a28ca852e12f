// Command gateway is a minimal API gateway in front of kvrouter: it routes
// one completion request, sends it to the chosen engine and rank, and marks
// its prefill done and its end. It is the request lifecycle of
// docs/gateway.md in runnable form; gateway_test.go runs it against a real
// router.
//
//	go run ./examples/go --router localhost:50051 --model my-model \
//	  --tokens 1,2,3,...  --fallback 10.0.0.5:8000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	routers := fs.String("router", "localhost:50051", "kvrouter replicas, comma-separated")
	model := fs.String("model", "bench-model", "model name")
	tokens := fs.String("tokens", "", "prompt token ids, comma-separated (the engine's tokenizer, after the chat template)")
	id := fs.String("request-id", fmt.Sprintf("gw-%d", time.Now().UnixNano()), "request id")
	fallback := fs.String("fallback", "", "engine endpoint to use when kvrouter cannot route")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ids, err := parseTokens(*tokens)
	if err != nil {
		return err
	}
	g := &Gateway{HTTP: http.DefaultClient, RouteTimeout: 50 * time.Millisecond,
		Fallback: func() string { return *fallback }}
	for _, addr := range strings.Split(*routers, ",") {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		g.Routers = append(g.Routers, kvrouterv1.NewRouterClient(cc))
	}
	body, err := json.Marshal(map[string]any{"model": *model, "prompt": ids, "max_tokens": 16, "stream": true})
	if err != nil {
		return err
	}
	res, err := g.Serve(ctx, *id, &kvrouterv1.Prompt{Model: *model, TokenIds: ids}, body)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func parseTokens(s string) ([]uint32, error) {
	if s == "" {
		return nil, fmt.Errorf("--tokens is empty")
	}
	var out []uint32
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--tokens: %w", err)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}
