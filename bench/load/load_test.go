package load

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/replay"
)

// fakeRouter answers Route and RouteStream with a prompt's block count as
// its matched blocks, and NotFound for a model named by nullModel.
type fakeRouter struct {
	kvrouterv1.UnimplementedRouterServer
}

func (fakeRouter) Route(_ context.Context, req *kvrouterv1.RouteRequest) (*kvrouterv1.RouteResponse, error) {
	if m := req.GetPrompt().GetModel(); m == nullModel("m") {
		return nil, status.Errorf(codes.NotFound, "no registered worker serves model %q", m)
	}
	return &kvrouterv1.RouteResponse{MatchedBlocks: uint32(len(req.GetPrompt().GetTokenIds()) / 16)}, nil
}

func (f fakeRouter) RouteStream(st kvrouterv1.Router_RouteStreamServer) error {
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := f.Route(st.Context(), req)
		s := status.Convert(err)
		if err := st.Send(&kvrouterv1.RouteStreamResponse{Response: resp, Code: uint32(s.Code()), Message: s.Message()}); err != nil {
			return err
		}
	}
}

// TestRouteCaller sends pre-marshaled requests as unary calls and on a
// stream, and checks both report the answer's matched blocks and an item's
// error as its status.
func TestRouteCaller(t *testing.T) {
	gs := grpc.NewServer()
	kvrouterv1.RegisterRouterServer(gs, fakeRouter{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(replay.RawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	marshal := func(model string, tokens int) []byte {
		b, err := proto.Marshal(&kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: model, TokenIds: make([]uint32, tokens)}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ok, null := marshal("m", 64), marshal(nullModel("m"), 64)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard, sized for a loaded machine
	defer cancel()
	for _, stream := range []bool{false, true} {
		call, closeCall, err := routeCaller(ctx, cc, stream)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if m, err := call(&ok); err != nil || m != 4 {
				t.Fatalf("stream %v: matched %d, %v; want 4 blocks", stream, m, err)
			}
			if _, err := call(&null); status.Code(err) != codes.NotFound {
				t.Fatalf("stream %v: unserved model answered %v, want NotFound", stream, err)
			}
		}
		closeCall()
	}
}
