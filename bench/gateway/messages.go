package gateway

import (
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Header and metadata names of the endpoint picker protocol.
const (
	DestinationHeader = "x-gateway-destination-endpoint"
	ServedKey         = "x-gateway-destination-endpoint-served"
	LBNamespace       = "envoy.lb"
)

// requestSender sends the request path of one stream, as Envoy does in
// full duplex: headers, then every body chunk without waiting for answers.
type requestSender struct {
	st    extprocv3.ExternalProcessor_ProcessClient
	r     *http.Request
	abort func() // ends the stream
}

// headerOnly reports a request with no body (headers carry end_of_stream).
func (s *requestSender) headerOnly() bool {
	return s.r.ContentLength == 0 || s.r.Body == nil || s.r.Body == http.NoBody
}

func (s *requestSender) headers() error {
	return s.st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: requestHeaderMap(s.r), EndOfStream: s.headerOnly()}}})
}

func (s *requestSender) body(b []byte, eos bool) error {
	return s.st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}})
}

// requestHeaderMap is r's headers as Envoy sends them: pseudo-headers
// first, lower-case names, values in raw_value.
func requestHeaderMap(r *http.Request) *corev3.HeaderMap {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	m := &corev3.HeaderMap{}
	add := func(k, v string) { m.Headers = append(m.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)}) }
	add(":method", r.Method)
	add(":path", r.URL.RequestURI())
	add(":authority", r.Host)
	add(":scheme", scheme)
	if r.ContentLength > 0 {
		add("content-length", strconv.FormatInt(r.ContentLength, 10))
	}
	addHeaders(m, r.Header)
	return m
}

func addHeaders(m *corev3.HeaderMap, h http.Header) {
	for k, vs := range h {
		if hopByHop[k] {
			continue
		}
		for _, v := range vs {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
		}
	}
}

func responseHeaderMap(resp *http.Response) *corev3.HeaderMap {
	m := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte(strconv.Itoa(resp.StatusCode))}}}
	addHeaders(m, resp.Header)
	return m
}

// headerValue is an option's value: Envoy sends raw_value, older peers value.
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// applyMutation applies a header mutation to h, leaving pseudo-headers
// (and content-length, which the gateway sets from the body) out.
func applyMutation(h http.Header, mut *extprocv3.HeaderMutation) {
	for _, o := range mut.GetSetHeaders() {
		k := o.GetHeader().GetKey()
		if strings.HasPrefix(k, ":") || strings.EqualFold(k, "content-length") {
			continue
		}
		if o.GetAppendAction() == corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD {
			h.Add(k, headerValue(o.GetHeader()))
		} else {
			h.Set(k, headerValue(o.GetHeader()))
		}
	}
	for _, k := range mut.GetRemoveHeaders() {
		h.Del(k)
	}
}

// destination is the picker's endpoint list: the header mutation's
// x-gateway-destination-endpoint, else the envoy.lb dynamic metadata's.
func destination(r *extprocv3.ProcessingResponse) string {
	for _, o := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if strings.EqualFold(o.GetHeader().GetKey(), DestinationHeader) {
			if v := headerValue(o.GetHeader()); v != "" {
				return v
			}
		}
	}
	if ns := r.GetDynamicMetadata().GetFields()[LBNamespace]; ns != nil {
		return ns.GetStructValue().GetFields()[DestinationHeader].GetStringValue()
	}
	return ""
}

// servedMetadata is the response headers' metadata naming the endpoint
// that served the request.
func servedMetadata(endpoint string) *corev3.Metadata {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{ServedKey: structpb.NewStringValue(endpoint)}}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{LBNamespace: s}}
}
