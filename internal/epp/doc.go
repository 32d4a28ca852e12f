// Package epp is kvrouter as a Gateway API Inference Extension endpoint
// picker: Envoy's external processing service
// (envoy.service.ext_proc.v3.ExternalProcessor/Process) in
// FULL_DUPLEX_STREAMED body mode, as GIE's endpoint picker protocol
// describes it.
//
// Each HTTP request is one Process stream. The picker buffers the request
// body (up to Config.MaxBodyBytes), routes the OpenAI request it holds
// through the router in the same process, then answers in order: the
// request headers response, whose header mutation names the chosen
// endpoint in x-gateway-destination-endpoint (with the same value in the
// envoy.lb dynamic metadata), then the body, echoed back byte for byte as
// streamed body responses. In this mode the upstream receives only what the
// picker sends back.
//
// The picker also sees the response: its first body chunk marks the
// request's prefill done, its end (or the stream's, however it ends) marks
// it finished. A gateway in front of the picker needs no code of its own
// for the request lifecycle, and the time policy learns from every request.
package epp
