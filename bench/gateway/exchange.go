package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// exchange is one request after the picker's first answer.
type exchange struct {
	g    *Gateway
	w    http.ResponseWriter
	r    *http.Request
	st   extprocv3.ExternalProcessor_ProcessClient
	body *bodyCopy
	// cancel ends the stream (a failed response path must not wait on it)
	cancel context.CancelFunc
}

// errProtocol marks a picker answer out of protocol.
var errProtocol = errors.New("endpoint picker out of protocol")

func (x *exchange) run(first *extprocv3.ProcessingResponse) {
	if imm := first.GetImmediateResponse(); imm != nil {
		x.immediate(imm)
		return
	}
	if first.GetRequestHeaders() == nil {
		x.fail(fmt.Errorf("%w: first answer %T, want request headers", errProtocol, first.GetResponse()))
		return
	}
	dests := splitEndpoints(destination(first))
	if len(dests) == 0 {
		x.fail(fmt.Errorf("%w: no %s in the headers response", errProtocol, DestinationHeader))
		return
	}
	echo, imm, err := x.echoedBody()
	if err != nil {
		x.fail(err)
		return
	}
	if imm != nil {
		x.immediate(imm)
		return
	}
	<-x.body.done // the request path is sent: the stream is the response path's now
	x.g.c.picked.Add(1)
	resp, err := x.g.forward(x.r, dests, first.GetRequestHeaders().GetResponse().GetHeaderMutation(), echo)
	if err != nil {
		x.g.c.upstreamErrors.Add(1)
		writeError(x.w, http.StatusBadGateway, err.Error())
		return
	}
	defer resp.Body.Close()
	x.respond(resp)
}

// echoedBody collects the body the picker sends back: all the upstream gets.
func (x *exchange) echoedBody() ([]byte, *extprocv3.ImmediateResponse, error) {
	if (&requestSender{r: x.r}).headerOnly() {
		return nil, nil, nil
	}
	var echo []byte
	for {
		m, err := x.st.Recv()
		if err != nil {
			return nil, nil, fmt.Errorf("endpoint picker stream ended in the request body: %w", err)
		}
		if imm := m.GetImmediateResponse(); imm != nil {
			return nil, imm, nil
		}
		if m.GetRequestTrailers() != nil {
			continue
		}
		br := m.GetRequestBody()
		if br == nil {
			return nil, nil, fmt.Errorf("%w: %T in the request body", errProtocol, m.GetResponse())
		}
		mut := br.GetResponse().GetBodyMutation()
		if b, ok := mut.GetMutation().(*extprocv3.BodyMutation_Body); ok { // a buffered mode's whole body
			return b.Body, nil, nil
		}
		sr := mut.GetStreamedResponse()
		if sr == nil {
			return nil, nil, fmt.Errorf("%w: a request body answer without a streamed response", errProtocol)
		}
		if len(echo)+len(sr.GetBody()) > x.g.cfg.MaxBodyBytes {
			return nil, nil, fmt.Errorf("%w: echoed body over %d bytes", errProtocol, x.g.cfg.MaxBodyBytes)
		}
		echo = append(echo, sr.GetBody()...)
		if sr.GetEndOfStream() {
			return echo, nil, nil
		}
	}
}

// immediate passes the picker's immediate response to the client.
func (x *exchange) immediate(imm *extprocv3.ImmediateResponse) {
	x.g.c.immediate.Add(1)
	applyMutation(x.w.Header(), imm.GetHeaders())
	code := int(imm.GetStatus().GetCode())
	if code < 100 || code > 999 {
		code = http.StatusOK // Envoy's default for an unset status
	}
	x.w.WriteHeader(code)
	x.w.Write(imm.GetBody())
}

func (x *exchange) fail(err error) {
	x.g.c.protocolErrors.Add(1)
	x.g.cfg.Logger.Warn("endpoint picker stream failed", "err", err)
	writeError(x.w, http.StatusBadGateway, err.Error())
}

// forward sends the body to the first of dests that answers.
func (g *Gateway) forward(r *http.Request, dests []string, mut *extprocv3.HeaderMutation, body []byte) (*http.Response, error) {
	var last error
	for _, d := range dests {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+d+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		copyHeader(req.Header, r.Header)
		applyMutation(req.Header, mut)
		req.ContentLength = int64(len(body))
		resp, err := g.cfg.Client.Do(req)
		if err == nil {
			resp.Request = req
			return resp, nil
		}
		last = err
	}
	return nil, fmt.Errorf("no upstream answered: %w", last)
}

// respond plays the response path: the headers and every body chunk go to
// the picker, and what it sends back goes to the client.
func (x *exchange) respond(resp *http.Response) {
	served := resp.Request.URL.Host
	if err := x.st.Send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: responseHeaderMap(resp)}},
		MetadataContext: servedMetadata(served),
	}); err != nil {
		x.fail(err)
		return
	}
	m, err := x.st.Recv()
	if err != nil {
		x.fail(fmt.Errorf("endpoint picker stream ended at the response headers: %w", err))
		return
	}
	if imm := m.GetImmediateResponse(); imm != nil {
		x.immediate(imm)
		return
	}
	if m.GetResponseHeaders() == nil {
		x.fail(fmt.Errorf("%w: %T answering the response headers", errProtocol, m.GetResponse()))
		return
	}
	h := x.w.Header()
	copyHeader(h, resp.Header)
	applyMutation(h, m.GetResponseHeaders().GetResponse().GetHeaderMutation())
	x.w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(x.w)
	rc.Flush()

	sent := make(chan error, 1)
	go func() {
		err := x.sendResponseBody(resp.Body)
		if err != nil {
			x.cancel()
		}
		sent <- err
	}()
	if err := x.relay(rc); err != nil {
		x.g.c.protocolErrors.Add(1)
		x.g.cfg.Logger.Warn("response cut short", "err", err)
		panic(http.ErrAbortHandler) // the client must not take a cut response for whole
	}
	<-sent
	x.st.CloseSend()
	for { // until the picker ends the stream
		if _, err := x.st.Recv(); err != nil {
			return
		}
	}
}

// sendResponseBody streams the upstream's body to the picker, chunk by
// chunk as it arrives, ending with an empty end_of_stream chunk.
func (x *exchange) sendResponseBody(body io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			if serr := x.st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: chunk}}}); serr != nil {
				return serr
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return err // the stream then ends without end_of_stream: the picker marks it finished
			}
			return x.st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}})
		}
	}
}

// relay writes the picker's echoed response chunks to the client until
// end_of_stream.
func (x *exchange) relay(rc *http.ResponseController) error {
	for {
		m, err := x.st.Recv()
		if err != nil {
			return fmt.Errorf("endpoint picker stream ended in the response body: %w", err)
		}
		if m.GetResponseTrailers() != nil {
			continue
		}
		sr := m.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return fmt.Errorf("%w: %T in the response body", errProtocol, m.GetResponse())
		}
		if len(sr.GetBody()) > 0 {
			if _, err := x.w.Write(sr.GetBody()); err != nil {
				return err
			}
			rc.Flush()
		}
		if sr.GetEndOfStream() {
			return nil
		}
	}
}
