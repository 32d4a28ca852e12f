// Package gateway is a small HTTP gateway that plays Envoy's side of the
// external processing protocol (envoy.service.ext_proc.v3) in front of an
// endpoint picker, as the Gateway API Inference Extension configures it:
// request and response bodies FULL_DUPLEX_STREAMED, headers SENT.
//
// No Envoy binary runs in this project's environment; this gateway lets
// bench and tests send real HTTP requests through the picker to real HTTP
// upstreams. For each request it opens one Process stream, sends the
// request headers and streams the body without waiting, and reads the
// picker's answers in order: an immediate response (passed through to the
// client), or the headers response naming the endpoint
// (x-gateway-destination-endpoint, or the envoy.lb dynamic metadata)
// followed by the body echoed back, which is all the upstream receives. The
// upstream's response goes back through the picker too (the served endpoint
// in the envoy.lb metadata, each body chunk echoed), which is how the
// picker learns when prefill is done and when the request ends. When the
// picker cannot be reached the gateway fails open to its own round robin
// over the configured upstreams, or answers 503.
package gateway
