package epp

import (
	"encoding/json"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names of the GIE endpoint picker protocol.
const (
	// DestinationHeader carries the pick, IP:PORT, in the request headers
	// response, and the same key in the envoy.lb dynamic metadata.
	DestinationHeader = "x-gateway-destination-endpoint"
	// LBNamespace is the dynamic and filter metadata namespace of the pick
	// and the served endpoint.
	LBNamespace = "envoy.lb"
	// ServedKey is the served endpoint in the response's envoy.lb metadata.
	ServedKey = "x-gateway-destination-endpoint-served"
	// SubsetNamespace and SubsetKey are the subset hint in the request's
	// filter metadata.
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
	// TestSelectionHeader chooses the endpoint in GIE conformance runs
	// (Config.ConformanceHeader); ServedTestHeader reports the served one.
	TestSelectionHeader = "test-epp-endpoint-selection"
	ServedTestHeader    = "x-conformance-test-served-endpoint"
)

// chunkBytes is the largest body chunk the picker sends back (llm-d's: under
// Envoy's default 64 KiB buffer).
const chunkBytes = 62000

// headerValue is a header's value: Envoy sends raw_value, older senders
// value.
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// pickedHeaders is the request headers response naming endpoint, with the
// body's length, and the pick in the envoy.lb dynamic metadata.
func pickedHeaders(endpoint string, bodyLen int, hasBody bool) *extprocv3.ProcessingResponse {
	set := []*corev3.HeaderValueOption{setHeader(DestinationHeader, endpoint)}
	if hasBody {
		set = append(set, setHeader("content-length", strconv.Itoa(bodyLen)))
	}
	md, _ := structpb.NewStruct(map[string]any{LBNamespace: map[string]any{DestinationHeader: endpoint}})
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{
				HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: set},
				ClearRouteCache: true,
			},
		}},
		DynamicMetadata: md,
	}
}

// streamedBody is a body chunk sent back, on the request or response path.
func streamedBody(request bool, chunk []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: chunk, EndOfStream: eos},
		}},
	}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

// responseHeaders lets the response headers through, with set added.
func responseHeaders(set ...*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
	cr := &extprocv3.CommonResponse{}
	if len(set) > 0 {
		cr.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: set}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: cr}}}
}

func trailers(request bool) *extprocv3.ProcessingResponse {
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}}
}

// immediate answers the HTTP request itself with status and a JSON error
// body in OpenAI's shape.
func immediate(status int, msg string) *extprocv3.ProcessingResponse {
	// encoding/json: protojson's output is deliberately unstable.
	js, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": msg, "type": "kvrouter_endpoint_picker", "code": status,
	}})
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}},
			Body:    js,
			Details: "kvrouter_epp_" + strconv.Itoa(status),
		}}}
}

// metadataString reads a string (or a list of strings, joined by commas)
// at md.filter_metadata[ns][key].
func metadataStrings(md *corev3.Metadata, ns, key string) []string {
	v := md.GetFilterMetadata()[ns].GetFields()[key]
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return []string{k.StringValue}
	case *structpb.Value_ListValue:
		var out []string
		for _, e := range k.ListValue.GetValues() {
			if s, ok := e.GetKind().(*structpb.Value_StringValue); ok {
				out = append(out, s.StringValue)
			}
		}
		return out
	}
	return nil
}

// firstEndpoint is the first of a comma-separated endpoint list.
func firstEndpoint(s string) string {
	s, _, _ = strings.Cut(s, ",")
	return strings.TrimSpace(s)
}
