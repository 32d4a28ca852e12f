package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// BenchmarkRouteText compares, interleaved in one loop over gRPC loopback, a Route given the
// text with a client that tokenizes (the same tokenizer) and sends a Route with the ids. Each
// prompt is new text (a request number in front), so the segment cache never answers and the
// word cache holds what a busy router's would. It reports each path's ns per request and their
// ratio (text / ids+tokenize).
func BenchmarkRouteText(b *testing.B) {
	idx := radix.New(radix.Config{})
	ing, err := ingest.New(ingest.Config{Index: idx, BlockSize: blockSize})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ing.Close() })
	rt, err := scoring.New(scoring.Config{Index: idx, BlockSize: blockSize, Seed: 1, Policy: scoring.PolicyBlocks})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Config{Router: rt, Ingest: ing, Index: idx})
	if err != nil {
		b.Fatal(err)
	}
	tk, tm := qwen3(b)
	if err := srv.SetText(TextConfig{BlockSize: blockSize, Models: []TextModel{{Name: "m", Tokenizer: tk, Template: tm}}}); err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(srv.GRPCOptions()...)
	srv.RegisterServices(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go gs.Serve(lis)
	b.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	client := kvrouterv1.NewRouterClient(cc)
	ctx := context.Background()
	if _, err := kvrouterv1.NewRegistryClient(cc).RegisterWorker(ctx, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: "w", Model: "m", Endpoint: "w:1"}}); err != nil {
		b.Fatal(err)
	}
	base := strings.Repeat(longText, 50) // about 2,700 tokens
	var textNS, idsNS time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		text := fmt.Sprintf("Request %d. %s", i, base)
		t0 := time.Now()
		if _, err := client.Route(ctx, &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", Text: text}}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		ids, err := tk.Encode(fmt.Sprintf("Request %d! %s", i, base), true)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := client.Route(ctx, &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: ids}}); err != nil {
			b.Fatal(err)
		}
		textNS += t1.Sub(t0)
		idsNS += time.Since(t1)
	}
	b.ReportMetric(float64(textNS.Nanoseconds())/float64(b.N), "text-ns/req")
	b.ReportMetric(float64(idsNS.Nanoseconds())/float64(b.N), "tokenize+ids-ns/req")
	b.ReportMetric(float64(textNS)/float64(idsNS), "text/ids-ratio")
}
