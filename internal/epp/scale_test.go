package epp

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// TestManyStreams holds 1,000 streams at once, each with its whole body
// buffered and its Route in progress, then lets them all finish: every one
// is answered with its pick and its body, and the memory the picker holds
// per stream is bounded by a small multiple of the body.
func TestManyStreams(t *testing.T) {
	const streams = 1000
	e := newEnv(t, envOpts{hold: true}, worker("w1", "m", "10.0.0.1:8000", 1))
	body := tokens("m", 1, 8192) // 8k tokens, ~48 KB
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	vs := make([]*envoy, streams)
	for i := range vs {
		vs[i] = e.open()
		vs[i].send(reqHeaders(hdrs(false, ":path: /v1/completions", completions(len(body))), nil))
		vs[i].send(reqBody(body[:len(body)/2], false))
		vs[i].send(reqBody(body[len(body)/2:], true))
	}
	for range streams {
		<-e.rec.entered // every stream is in Route, its body held
	}
	var during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&during)
	perStream := (int64(during.HeapAlloc) - int64(before.HeapAlloc)) / streams
	t.Logf("%d streams held: %d bytes of heap each (client and server sides), body %d bytes", streams, perStream, len(body))
	// Both ends of a gRPC stream and the body: far under this bound.
	if limit := int64(64<<10 + 4*len(body)); perStream > limit {
		t.Errorf("heap per stream %d bytes, over %d", perStream, limit)
	}
	close(e.rec.hold)
	var wg sync.WaitGroup
	errs := make(chan string, streams)
	for _, v := range vs {
		wg.Go(func() {
			r, err := v.stream.Recv()
			if err != nil || r.GetRequestHeaders() == nil {
				errs <- fmt.Sprintf("no headers response: %v %v", err, r)
				return
			}
			var got []byte
			for {
				r, err := v.stream.Recv()
				if err != nil {
					errs <- err.Error()
					return
				}
				sr := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
				got = append(got, sr.GetBody()...)
				if sr.GetEndOfStream() {
					break
				}
			}
			if string(got) != body {
				errs <- "echo differs"
			}
			v.stream.CloseSend()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
