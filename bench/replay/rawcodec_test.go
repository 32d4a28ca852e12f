package replay

import (
	"testing"

	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

func TestRawCodec(t *testing.T) {
	msg := &kvrouterv1.RouteRequest{RequestId: "x", Prompt: &kvrouterv1.Prompt{TokenIds: []uint32{1, 2, 3}}}
	pre, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var c RawCodec
	got, err := c.Marshal(&pre)
	if err != nil || string(got) != string(pre) {
		t.Fatalf("pre-marshaled bytes not passed through: %v", err)
	}
	got, err = c.Marshal(msg)
	if err != nil || string(got) != string(pre) {
		t.Fatalf("message marshal: %v", err)
	}
	var back kvrouterv1.RouteRequest
	if err := c.Unmarshal(pre, &back); err != nil || back.RequestId != "x" || len(back.Prompt.TokenIds) != 3 {
		t.Fatalf("unmarshal: %v %v", err, &back)
	}
	if c.Name() != "proto" {
		t.Fatal("codec must keep the proto content-subtype")
	}
}
