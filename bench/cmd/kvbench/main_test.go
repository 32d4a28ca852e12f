package main

import (
	"testing"

	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

func TestDocPool(t *testing.T) {
	p := docPool{Docs: 10, Groups: 2, DocBlocks: 8, SharedBlocks: 2, BlockSize: 4}
	a, b, c := p.tokens(0, nil), p.tokens(2, nil), p.tokens(1, nil)
	if len(a) != 32 {
		t.Fatalf("len %d", len(a))
	}
	shared := 2 * 4
	for i := 0; i < shared; i++ {
		if a[i] != b[i] {
			t.Fatalf("same group differs in the shared prefix at %d", i)
		}
	}
	if a[0] == c[0] && a[1] == c[1] && a[2] == c[2] {
		t.Fatal("different groups share a prefix")
	}
	if a[shared] == b[shared] && a[shared+1] == b[shared+1] {
		t.Fatal("documents share blocks past the group prefix")
	}
}

func TestRawCodec(t *testing.T) {
	msg := &kvrouterv1.RouteRequest{RequestId: "x", Prompt: &kvrouterv1.Prompt{TokenIds: []uint32{1, 2, 3}}}
	pre, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var c rawCodec
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
