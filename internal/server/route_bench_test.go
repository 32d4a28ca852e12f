package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// The Route benchmark's fleet: routeBenchWorkers workers x routeBenchDP
// ranks (1000 ranks, as kvbench load), each holding
// KVROUTER_BENCH_BLOCKS blocks (default 2,048; the setting is
// 16,384) of 512-block documents, 64 groups of which share a 64-block
// prefix, as kvbench load's pool.
const (
	routeBenchWorkers = 125
	routeBenchDP      = 8
	routeBenchModel   = "load-model"
	routeBenchDocs    = 4000
	routeBenchGroups  = 64
	routeDocBlocks    = 512 // 8,192 tokens
	routeShared       = 64
	routeVariants     = 256 // distinct pre-built requests, cycled
)

func routeBenchBlocks() int {
	if n, err := strconv.Atoi(os.Getenv("KVROUTER_BENCH_BLOCKS")); err == nil && n > 0 {
		return n
	}
	return 2048
}

// routeBenchPolicy is the routers' cost policy: KVROUTER_BENCH_POLICY
// (time or blocks), the default config's when unset.
func routeBenchPolicy(b *testing.B) scoring.Policy {
	v := os.Getenv("KVROUTER_BENCH_POLICY")
	if v == "" {
		return ""
	}
	p, err := scoring.ParsePolicy(v)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func benchMix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// benchDoc returns document d's tokens (kvbench load's docPool).
func benchDoc(d int) []uint32 {
	g := d % routeBenchGroups
	out := make([]uint32, 0, routeDocBlocks*blockSize)
	for b := range routeDocBlocks {
		src := uint64(1)<<62 | uint64(g)<<20 | uint64(b)
		if b >= routeShared {
			src = uint64(d)<<20 | uint64(b)
		}
		for i := range blockSize {
			out = append(out, uint32(benchMix(src*64+uint64(i))%128000))
		}
	}
	return out
}

type routeBench struct {
	idx    *radix.Index
	srv    *Server
	srvNP  *Server                    // the same, with predictions off
	rt     *scoring.Router            // srv's router
	tokReq []*kvrouterv1.RouteRequest // token ids
	hshReq []*kvrouterv1.RouteRequest // client-sent block hashes
	hashes [][]uint64                 // the prompts' router block hashes
	tokBuf [][]byte                   // tokReq encoded
	hshBuf [][]byte                   // hshReq encoded
}

// newRouteBench fills an index, and builds a router (default config, as
// kvrouter runs) and a Server on it, with requests pre-built.
func newRouteBench(b *testing.B) *routeBench {
	b.Helper()
	fill := routeBenchBlocks()
	idx := radix.New(radix.Config{})
	ing, err := ingest.New(ingest.Config{Index: idx, BlockSize: blockSize})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ing.Close() })
	policy := routeBenchPolicy(b)
	rt, err := scoring.New(scoring.Config{Index: idx, BlockSize: blockSize, Seed: 1, Policy: policy})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Config{Router: rt, Ingest: ing, Index: idx})
	if err != nil {
		b.Fatal(err)
	}
	rtNP, err := scoring.New(scoring.Config{Index: idx, BlockSize: blockSize, Seed: 1, DisablePrediction: true, Policy: policy})
	if err != nil {
		b.Fatal(err)
	}
	srvNP, err := New(Config{Router: rtNP, Ingest: ing, Index: idx})
	if err != nil {
		b.Fatal(err)
	}
	seed := normalize.Seed("", "")
	docHashes := make(map[int][]uint64)
	docOf := func(d int) []uint64 {
		if h, ok := docHashes[d]; ok {
			return h
		}
		h := normalize.HashPrompt(seed, benchDoc(d), blockSize, nil, nil)
		docHashes[d] = h
		return h
	}
	rng := rand.New(rand.NewPCG(3, 4))
	blocks := make([]kv.Block, routeDocBlocks)
	for w := range routeBenchWorkers {
		id := fmt.Sprintf("load-%04d", w)
		for _, r := range []*scoring.Router{rt, rtNP} {
			if err := r.AddWorker(scoring.Worker{ID: id, Model: routeBenchModel, Endpoint: "sim://" + id, DPSize: routeBenchDP}); err != nil {
				b.Fatal(err)
			}
		}
		for r := range routeBenchDP {
			wr := kv.WorkerRank{ID: id, DPRank: uint32(r)}
			rankSeed := uint64(w*routeBenchDP+r)*0x9E3779B97F4A7C15 + 7
			for held := 0; held < fill; {
				hs := docOf(rng.IntN(routeBenchDocs))
				n := min(len(hs), fill-held)
				for i := range n {
					// An engine's hash of a block is the same whenever it stores it.
					blocks[i] = kv.Block{EngineHash: benchMix(hs[i] ^ rankSeed), BlockHash: hs[i]}
				}
				if err := idx.Store(wr, 0, false, kv.TierDevice, blocks[:n]); err != nil {
					b.Fatal(err)
				}
				held += n
			}
		}
	}
	rb := &routeBench{idx: idx, srv: srv, srvNP: srvNP, rt: rt}
	prng := rand.New(rand.NewPCG(1, 2))
	for range routeVariants {
		d := prng.IntN(routeBenchDocs)
		toks, hs := benchDoc(d), docOf(d)
		tr := &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: routeBenchModel, TokenIds: toks}, MaxCandidates: 1}
		hr := &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: routeBenchModel, BlockHashes: hs}, MaxCandidates: 1}
		tb, err := proto.Marshal(tr)
		if err != nil {
			b.Fatal(err)
		}
		hb, err := proto.Marshal(hr)
		if err != nil {
			b.Fatal(err)
		}
		rb.tokReq, rb.hshReq, rb.hashes = append(rb.tokReq, tr), append(rb.hshReq, hr), append(rb.hashes, hs)
		rb.tokBuf, rb.hshBuf = append(rb.tokBuf, tb), append(rb.hshBuf, hb)
	}
	return rb
}

// passCodec is the client's codec: a *[]byte is sent as it is (requests are
// pre-marshalled, as kvbench load sends them), anything else is protobuf.
type passCodec struct{ base encoding.CodecV2 }

func (c passCodec) Name() string { return c.base.Name() }
func (c passCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(*[]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
	}
	return c.base.Marshal(v)
}
func (c passCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.base.Unmarshal(data, v) }

// nullMethod is the transport baseline: a test-only service on the same
// grpc.Server (same options: the interceptor and the codec) whose one method
// decodes a RouteRequest and answers an empty RouteResponse, doing no
// routing work.
const nullMethod = "/kvrouterbench.Null/Route"

type nullServer interface{ null() }

type nullImpl struct{}

func (nullImpl) null() {}

const nullStreamMethod = "/kvrouterbench.Null/RouteStream"

var nullDesc = grpc.ServiceDesc{
	ServiceName: "kvrouterbench.Null",
	HandlerType: (*nullServer)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName: "RouteStream", ServerStreams: true, ClientStreams: true,
		// As Server.RouteStream: one request reused, an answer per item.
		Handler: func(_ any, ss grpc.ServerStream) error {
			var in kvrouterv1.RouteRequest
			for {
				keepRequest(&in)
				if err := ss.RecvMsg(&in); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if err := ss.SendMsg(&kvrouterv1.RouteStreamResponse{Response: &kvrouterv1.RouteResponse{}}); err != nil {
					return err
				}
			}
		},
	}},
	Methods: []grpc.MethodDesc{{
		MethodName: "Route",
		Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(kvrouterv1.RouteRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) { return &kvrouterv1.RouteResponse{}, nil }
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: nullMethod}, h)
		},
	}},
}

// serveBench serves srv and the null service on loopback; the client sends
// pre-marshalled requests.
func serveBench(b *testing.B, srv *Server) *grpc.ClientConn {
	b.Helper()
	gs := grpc.NewServer(srv.GRPCOptions()...)
	srv.RegisterServices(gs)
	gs.RegisterService(&nullDesc, nullImpl{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go gs.Serve(lis)
	b.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(passCodec{base: encoding.GetCodecV2("proto")})))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return cc
}

func procCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs op b.N times and reports, besides ns/op (wall), the process
// CPU per op (cpu-µs/op: in the gRPC cases client and server together) and
// the heap allocations per op counted by the runtime (allocs-per-route).
func measure(b *testing.B, op func(i int)) int {
	b.ReportAllocs()
	op(0) // warm: pools, slot cache
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := procCPU()
	b.ResetTimer()
	iters := 0
	for b.Loop() {
		op(iters + 1)
		iters++
	}
	b.StopTimer()
	cpu := procCPU() - cpu0
	runtime.ReadMemStats(&m1)
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(iters), "cpu-µs/op")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(iters), "allocs-per-route")
	return iters
}

// loadWindow feeds inprocess-load: requests with request ids, each op
// routing one and ending (MarkPrefillDone, MarkFinished) the one routed
// loadWindowSize ops before, so the router sees active load and, under the
// time policy, learns timings and reuse.
type loadWindow struct {
	reqs []*kvrouterv1.RouteRequest
	seq  int
}

const (
	loadWindowSize = 64
	loadWindowIDs  = 1024 // request ids, cycled (> loadWindowSize)
)

func newLoadWindow(name string, prompts []*kvrouterv1.RouteRequest) *loadWindow {
	lw := &loadWindow{}
	for j := range loadWindowIDs {
		lw.reqs = append(lw.reqs, &kvrouterv1.RouteRequest{Prompt: prompts[j%len(prompts)].Prompt,
			MaxCandidates: 1, RequestId: fmt.Sprintf("%s-%d", name, j)})
	}
	return lw
}

// next ends the request loadWindowSize ops back and returns the next one.
func (lw *loadWindow) next(b *testing.B, rt *scoring.Router) *kvrouterv1.RouteRequest {
	if lw.seq >= loadWindowSize {
		id := lw.reqs[(lw.seq-loadWindowSize)%loadWindowIDs].RequestId
		if err := rt.MarkPrefillDone(id); err != nil {
			b.Fatal(err)
		}
		if err := rt.MarkFinished(id); err != nil {
			b.Fatal(err)
		}
	}
	q := lw.reqs[lw.seq%loadWindowIDs]
	lw.seq++
	return q
}

// BenchmarkRoute splits an 8,192-token Route (max_candidates 1, as kvbench
// load sends) against 1000 ranks into its parts, all on the same index and
// requests:
//
//   - match: the index match alone (radix.Index.Match of the prompt's 512
//     block hashes, as BenchmarkMatch512);
//   - hash: hashing 8,192 token ids into 512 block hashes;
//   - decode: the server codec decoding the request bytes;
//   - inprocess/*: Server.Route called directly with a decoded request
//     (everything a Route costs except gRPC and decoding), with the
//     router's default config; inprocess-nopredict/* the same with
//     predictions off (the difference is the prediction overlay);
//     inprocess-load/* the same with request ids, 64 requests active
//     (each op also ends the request routed 64 ops before);
//   - grpc/*: Route over a loopback gRPC connection, client in process,
//     requests pre-marshalled;
//   - baseline/*: the transport alone, over the same connection: the
//     null service decodes the same request bytes with the same codec and
//     answers an empty RouteResponse;
//   - stream/*: RouteStream, one item per op (sent, then its answer read)
//     on one stream; baseline-stream/* the null service's stream, which
//     decodes each item and answers an empty RouteStreamResponse.
//
// tokens sends token_ids; hashes sends client-computed block_hashes.
// Fleet size: KVROUTER_BENCH_BLOCKS blocks per rank; the routers' policy:
// KVROUTER_BENCH_POLICY.
func BenchmarkRoute(b *testing.B) {
	rb := newRouteBench(b)
	ctx := context.Background()
	n := len(rb.tokReq)
	b.Logf("1000 ranks x %d blocks; index %+v", routeBenchBlocks(), rb.idx.Stats())

	b.Run("match", func(b *testing.B) {
		var out []radix.Score
		var scored int
		iters := measure(b, func(i int) {
			out = rb.idx.Match(rb.hashes[i%n], out)
			scored += len(out)
		})
		b.ReportMetric(float64(scored)/float64(iters+1), "ranks/match")
	})
	b.Run("hash", func(b *testing.B) {
		var h normalize.PromptHasher
		var out []uint64
		seed := normalize.Seed("", "")
		measure(b, func(i int) {
			out = h.Hash(seed, rb.tokReq[i%n].Prompt.TokenIds, blockSize, nil, out[:0])
		})
	})
	c := newCodec()
	for _, k := range []struct {
		name string
		reqs []*kvrouterv1.RouteRequest
		bufs [][]byte
	}{{"tokens", rb.tokReq, rb.tokBuf}, {"hashes", rb.hshReq, rb.hshBuf}} {
		b.Run("decode/"+k.name, func(b *testing.B) {
			measure(b, func(i int) {
				m := new(kvrouterv1.RouteRequest)
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(k.bufs[i%n])}, m); err != nil {
					b.Fatal(err)
				}
			})
			b.ReportMetric(float64(len(k.bufs[0])), "request-bytes")
		})
		lw := newLoadWindow(k.name, k.reqs)
		b.Run("inprocess-load/"+k.name, func(b *testing.B) {
			measure(b, func(int) {
				if _, err := rb.srv.Route(ctx, lw.next(b, rb.rt)); err != nil {
					b.Fatal(err)
				}
			})
		})
		for _, v := range []struct {
			name string
			srv  *Server
		}{{"inprocess/", rb.srv}, {"inprocess-nopredict/", rb.srvNP}} {
			b.Run(v.name+k.name, func(b *testing.B) {
				var matched uint64
				iters := measure(b, func(i int) {
					resp, err := v.srv.Route(ctx, k.reqs[i%n])
					if err != nil {
						b.Fatal(err)
					}
					matched += uint64(resp.MatchedBlocks)
				})
				b.ReportMetric(float64(matched)/float64(iters+1), "matched-blocks")
			})
		}
	}
	cc := serveBench(b, rb.srv)
	for _, k := range []struct {
		name string
		bufs [][]byte
	}{{"tokens", rb.tokBuf}, {"hashes", rb.hshBuf}} {
		b.Run("grpc/"+k.name, func(b *testing.B) {
			resp := new(kvrouterv1.RouteResponse)
			measure(b, func(i int) {
				resp.Reset()
				if err := cc.Invoke(ctx, "/kvrouter.v1.Router/Route", &k.bufs[i%n], resp); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run("baseline/"+k.name, func(b *testing.B) {
			resp := new(kvrouterv1.RouteResponse)
			measure(b, func(i int) {
				resp.Reset()
				if err := cc.Invoke(ctx, nullMethod, &k.bufs[i%n], resp); err != nil {
					b.Fatal(err)
				}
			})
		})
		for _, st := range []struct{ name, method string }{
			{"stream/", kvrouterv1.Router_RouteStream_FullMethodName},
			{"baseline-stream/", nullStreamMethod},
		} {
			b.Run(st.name+k.name, func(b *testing.B) {
				cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, st.method)
				if err != nil {
					b.Fatal(err)
				}
				defer cs.CloseSend()
				resp := new(kvrouterv1.RouteStreamResponse)
				measure(b, func(i int) {
					if err := cs.SendMsg(&k.bufs[i%n]); err != nil {
						b.Fatal(err)
					}
					resp.Reset()
					if err := cs.RecvMsg(resp); err != nil || resp.Code != 0 {
						b.Fatal(err, resp.Message)
					}
				})
			})
		}
	}
}
