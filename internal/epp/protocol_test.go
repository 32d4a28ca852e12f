package epp

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// TestProtocol runs testdata/protocol: each stream is a list of messages
// Envoy sends; the test then closes its side and prints every response
// the picker sent, and the marks it made, in order.
func TestProtocol(t *testing.T) {
	var e *env
	datadriven.RunTest(t, "testdata/protocol", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "router":
			var workers []*kvrouterv1.Worker
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				f := strings.Fields(line)
				dp, _ := strconv.Atoi(f[3])
				workers = append(workers, worker(f[0], f[1], f[2], uint32(dp)))
			}
			var o envOpts
			o.picker = func(c *Config) {
				for _, a := range d.CmdArgs {
					switch a.Key {
					case "max-body":
						c.MaxBodyBytes, _ = strconv.Atoi(a.Vals[0])
					case "conformance":
						c.ConformanceHeader = true
					}
				}
			}
			e = newEnv(t, o, workers...)
			return ""
		case "stream":
			v := e.open()
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				v.send(message(t, line))
			}
			if err := v.stream.CloseSend(); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			for {
				r, err := v.stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					fmt.Fprintf(&out, "stream error: %v\n", err)
					break
				}
				out.WriteString(describe(r) + "\n")
			}
			for done := false; !done; { // the marks were made before the stream ended
				select {
				case m := <-e.rec.marks:
					out.WriteString("mark " + m + "\n")
				default:
					done = true
				}
			}
			return out.String()
		}
		return "unknown command " + d.Cmd
	})
}

// message parses one line of a stream: a kind, then words; "eos" ends
// the stream direction, "x=y" sets a header, "subset=a,b" or
// "served=ep" metadata, and the rest (after "|") is a body.
func message(t *testing.T, line string) *extprocv3.ProcessingRequest {
	words, body, _ := strings.Cut(line, "|")
	f := strings.Fields(words)
	eos := false
	var kv []string
	var md *corev3.Metadata
	for _, w := range f[1:] {
		switch k, v, ok := strings.Cut(w, "="); {
		case w == "eos":
			eos = true
		case ok && k == "subset":
			md = metadata(SubsetNamespace, SubsetKey, v)
		case ok && k == "served":
			md = metadata(LBNamespace, ServedKey, v)
		case ok:
			kv = append(kv, k+": "+v)
		}
	}
	body = strings.TrimSpace(body)
	switch f[0] {
	case "headers":
		return reqHeaders(hdrs(eos, kv...), md)
	case "body":
		return reqBody(body, eos)
	case "trailers":
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
	case "response-headers":
		r := respHeaders("", eos)
		r.MetadataContext = md
		return r
	case "response-body":
		return respBody(body, eos)
	}
	t.Fatalf("unknown message %q", line)
	return nil
}

// describe is one line for a response.
func describe(r *extprocv3.ProcessingResponse) string {
	var b strings.Builder
	switch x := r.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		b.WriteString("request-headers")
		writeMutation(&b, x.RequestHeaders.GetResponse().GetHeaderMutation())
		if x.RequestHeaders.GetResponse().GetClearRouteCache() {
			b.WriteString(" clear-route-cache")
		}
		if md := r.GetDynamicMetadata().GetFields()[LBNamespace].GetStructValue().GetFields()[DestinationHeader]; md != nil {
			fmt.Fprintf(&b, " metadata=%s", md.GetStringValue())
		}
	case *extprocv3.ProcessingResponse_RequestBody:
		writeBody(&b, "request-body", x.RequestBody)
	case *extprocv3.ProcessingResponse_RequestTrailers:
		b.WriteString("request-trailers")
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		b.WriteString("response-headers")
		writeMutation(&b, x.ResponseHeaders.GetResponse().GetHeaderMutation())
	case *extprocv3.ProcessingResponse_ResponseBody:
		writeBody(&b, "response-body", x.ResponseBody)
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		fmt.Fprintf(&b, "immediate %d %s", x.ImmediateResponse.GetStatus().GetCode(), x.ImmediateResponse.GetBody())
	default:
		fmt.Fprintf(&b, "%T", x)
	}
	return b.String()
}

func writeMutation(b *strings.Builder, m *extprocv3.HeaderMutation) {
	for _, o := range m.GetSetHeaders() {
		fmt.Fprintf(b, " %s=%s", o.GetHeader().GetKey(), headerValue(o.GetHeader()))
	}
}

func writeBody(b *strings.Builder, kind string, r *extprocv3.BodyResponse) {
	sr := r.GetResponse().GetBodyMutation().GetStreamedResponse()
	fmt.Fprintf(b, "%s |%s|", kind, sr.GetBody())
	if sr.GetEndOfStream() {
		b.WriteString(" eos")
	}
}
