package epp

import (
	"context"
	"net"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
)

// BenchmarkPickerVsRoute measures a request through the picker against
// what a gateway does without it, interleaved in one run on the same
// router: Route, MarkPrefillDone and MarkFinished over gRPC (the baseline),
// and one ext_proc stream as Envoy drives it in full duplex (headers, an
// 8k-token completions body in 16 KiB chunks, the pick and the echo, the
// response headers and two response chunks, whose marks the picker sends).
// It reports each path's time per request and their ratio.
func BenchmarkPickerVsRoute(b *testing.B) {
	idx := radix.New(radix.Config{})
	ing, err := ingest.New(ingest.Config{Index: idx, BlockSize: testBlockSize})
	if err != nil {
		b.Fatal(err)
	}
	defer ing.Close()
	rt, err := scoring.New(scoring.Config{Index: idx, BlockSize: testBlockSize, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(server.Config{Router: rt, Ingest: ing, Index: idx})
	if err != nil {
		b.Fatal(err)
	}
	for _, id := range []string{"w1", "w2", "w3", "w4"} {
		if err := srv.Register(worker(id, "m", "10.0.0.1:8000", 2), server.SourceAPI, false); err != nil {
			b.Fatal(err)
		}
	}
	p, err := New(Config{Router: srv, Fleet: FleetFunc(srv.Fleet), Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(srv.GRPCOptions()...)
	srv.RegisterServices(gs)
	p.Register(gs) // the router's and the picker's services on one server, as kvrouter serves them
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	rc, xc := kvrouterv1.NewRouterClient(cc), extprocv3.NewExternalProcessorClient(cc)

	const prompts, n = 64, 8192
	bodies := make([]string, prompts)
	ids := make([][]uint32, prompts)
	for i := range prompts {
		bodies[i] = tokens("m", 100000*i, n)
		ids[i] = make([]uint32, n)
		for j := range ids[i] {
			ids[i][j] = uint32(100000*i + j)
		}
	}
	ctx := context.Background()
	direct := func(i int) {
		id := "direct-" + itoa(i)
		if _, err := rc.Route(ctx, &kvrouterv1.RouteRequest{RequestId: id, Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: ids[i%prompts]}, MaxCandidates: 1}); err != nil {
			b.Fatal(err)
		}
		if _, err := rc.MarkPrefillDone(ctx, &kvrouterv1.RequestRef{RequestId: id}); err != nil {
			b.Fatal(err)
		}
		if _, err := rc.MarkFinished(ctx, &kvrouterv1.RequestRef{RequestId: id}); err != nil {
			b.Fatal(err)
		}
	}
	picker := func(i int) {
		s, err := xc.Process(ctx)
		if err != nil {
			b.Fatal(err)
		}
		body := bodies[i%prompts]
		must(b, s.Send(reqHeaders(hdrs(false, ":method: POST", ":path: /v1/completions", completions(len(body))), nil)))
		for off := 0; off < len(body); off += 16 << 10 {
			end := min(off+16<<10, len(body))
			must(b, s.Send(reqBody(body[off:end], end == len(body))))
		}
		for {
			r, err := s.Recv()
			must(b, err)
			if r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
				break
			}
		}
		must(b, s.Send(respHeaders("10.0.0.1:8000", false)))
		must(b, s.Send(respBody("data: x", false)))
		must(b, s.Send(respBody("data: [DONE]", true)))
		for range 3 {
			_, err := s.Recv()
			must(b, err)
		}
		must(b, s.CloseSend())
		if _, err := s.Recv(); err == nil {
			b.Fatal("stream not ended")
		}
	}
	for i := range prompts { // warm both paths
		direct(i)
		picker(i)
	}
	var tDirect, tPicker time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		first, second, t1, t2 := direct, picker, &tDirect, &tPicker
		if i%2 == 1 {
			first, second, t1, t2 = picker, direct, &tPicker, &tDirect
		}
		start := time.Now()
		first(i)
		mid := time.Now()
		second(i)
		*t1 += mid.Sub(start)
		*t2 += time.Since(mid)
	}
	b.ReportMetric(float64(tDirect.Nanoseconds())/float64(b.N), "route+marks-ns/req")
	b.ReportMetric(float64(tPicker.Nanoseconds())/float64(b.N), "epp-ns/req")
	b.ReportMetric(float64(tPicker)/float64(tDirect), "epp/route-ratio")
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var buf [20]byte
	n := len(buf)
	for ; i > 0; i /= 10 {
		n--
		buf[n] = digits[i%10]
	}
	return string(buf[n:])
}
