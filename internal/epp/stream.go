package epp

import (
	"errors"
	"strconv"
	"strings"

	"context"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// reqStream is one Process stream's state: the request's headers, its
// body while it arrives, the pick, and the response's progress.
type reqStream struct {
	p    *Picker
	ctx  context.Context
	send func(*extprocv3.ProcessingResponse) error

	path      string
	testPick  string // test-epp-endpoint-selection (Config.ConformanceHeader)
	subset    *subset
	hasBody   bool   // the request has a body stream (its headers did not end it)
	trailers  bool   // the body ended with trailers, not end_of_stream
	body      []byte // the request body so far
	picked    string // the endpoint chosen; "" until then
	requestID string // the router's load is held under it; "" when none is
	prefilled bool   // the first response body chunk was seen
	respDone  bool   // the response ended
}

// handle acts on one message of the stream; done ends the stream (an
// immediate response was sent).
func (s *reqStream) handle(req *extprocv3.ProcessingRequest) (done bool, err error) {
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return s.requestHeaders(req, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return s.requestBody(r.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if s.picked == "" {
			s.trailers = true
			if done, err := s.pick(); done || err != nil {
				return done, err
			}
		}
		return false, s.send(trailers(true))
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return false, s.responseHeaders(req, r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return false, s.responseBody(r.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		err := s.send(trailers(false))
		s.finish()
		return false, err
	default:
		s.p.m.skip(skipUnknownFrame)
		return false, nil
	}
}

func (s *reqStream) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (bool, error) {
	s.hasBody = !h.GetEndOfStream()
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch strings.ToLower(hv.GetKey()) {
		case ":path":
			s.path = headerValue(hv)
		case "content-length":
			if n, err := strconv.Atoi(headerValue(hv)); err == nil && n > 0 {
				if n > s.p.cfg.MaxBodyBytes {
					return s.refuse(ErrBodyTooLarge, "content-length "+strconv.Itoa(n)+" is over --epp-max-body-bytes "+strconv.Itoa(s.p.cfg.MaxBodyBytes))
				}
				s.grow(n)
			}
		case TestSelectionHeader:
			if s.p.cfg.ConformanceHeader {
				s.testPick = headerValue(hv)
			}
		}
	}
	if entries := metadataStrings(req.GetMetadataContext(), SubsetNamespace, SubsetKey); entries != nil {
		sub, ok := parseSubset(entries)
		if !ok {
			return s.refuse(ErrNoEndpoint, "the subset hint lists no endpoint")
		}
		s.subset = sub
	}
	if h.GetEndOfStream() {
		return s.pick()
	}
	return false, nil
}

func (s *reqStream) requestBody(b *extprocv3.HttpBody) (bool, error) {
	if s.picked != "" {
		// After the body's end: Envoy's duplicate end_of_stream; after a
		// header-only request's pick: nothing the upstream expects.
		if len(s.body) > 0 || b.GetEndOfStream() {
			s.p.m.skip(skipDuplicateEOS)
		} else {
			s.p.m.skip(skipBodyAfterPick)
		}
		return false, nil
	}
	chunk := b.GetBody()
	if len(s.body)+len(chunk) > s.p.cfg.MaxBodyBytes {
		return s.refuse(ErrBodyTooLarge, "the request body is over --epp-max-body-bytes "+strconv.Itoa(s.p.cfg.MaxBodyBytes))
	}
	if len(chunk) > 0 {
		if cap(s.body)-len(s.body) < len(chunk) {
			s.grow(len(s.body) + len(chunk))
		}
		s.body = append(s.body, chunk...)
		s.p.m.buffered.Add(float64(len(chunk)))
	}
	if b.GetEndOfStream() {
		return s.pick()
	}
	return false, nil
}

// grow gives the body room for n bytes, at most MaxBodyBytes: doubling, so a
// body of unknown length costs amortized copies.
func (s *reqStream) grow(n int) {
	if cap(s.body) >= n {
		return
	}
	c := max(n, 2*cap(s.body))
	c = min(c, s.p.cfg.MaxBodyBytes)
	nb := make([]byte, len(s.body), c)
	copy(nb, s.body)
	s.body = nb
}

// pick chooses the endpoint, then sends the headers response and the body.
func (s *reqStream) pick() (bool, error) {
	ep, err := s.choose()
	if err != nil {
		return s.refuse(err, err.Error())
	}
	s.picked = ep
	s.p.m.answered(200)
	if err := s.send(pickedHeaders(ep, len(s.body), s.hasBody)); err != nil {
		return false, err
	}
	if !s.hasBody {
		return false, nil
	}
	return false, s.echo()
}

// echo sends the buffered body back in chunks, the last with end_of_stream
// (unless trailers end the request), then lets the buffer go.
func (s *reqStream) echo() error {
	b := s.body
	for {
		n := min(len(b), chunkBytes)
		if err := s.send(streamedBody(true, b[:n], n == len(b) && !s.trailers)); err != nil {
			return err
		}
		b = b[n:]
		if len(b) == 0 {
			break
		}
	}
	s.release()
	return nil
}

func (s *reqStream) release() {
	s.p.m.buffered.Sub(float64(len(s.body)))
	s.body = nil
}

// refuse answers the request with err's HTTP status and ends the stream.
func (s *reqStream) refuse(err error, msg string) (bool, error) {
	st := s.p.httpStatus(err)
	s.p.m.answered(st)
	s.p.cfg.Logger.Debug("epp: request refused", "status", st, "err", msg)
	return true, s.send(immediate(st, msg))
}

// httpStatus is the HTTP status a refusal is answered with.
func (p *Picker) httpStatus(err error) int {
	switch {
	case errors.Is(err, ErrBadRequest):
		return 400
	case errors.Is(err, ErrUnknownModel):
		return 404
	case errors.Is(err, ErrBodyTooLarge):
		return 413
	case errors.Is(err, ErrBusy):
		return p.cfg.BusyStatus
	case errors.Is(err, ErrNoEndpoint):
		return 503
	}
	return 500
}

func (s *reqStream) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	served := ""
	if v := metadataStrings(req.GetMetadataContext(), LBNamespace, ServedKey); len(v) > 0 {
		served = firstEndpoint(v[0])
	}
	if served != "" && s.picked != "" && served != firstEndpoint(s.picked) && s.requestID != "" {
		// The router's load sits on the pick; the request runs elsewhere.
		s.p.m.skip(skipServedOther)
		s.finish()
	}
	var out *extprocv3.ProcessingResponse
	if s.p.cfg.ConformanceHeader && served != "" {
		out = responseHeaders(setHeader(ServedTestHeader, served))
	} else {
		out = responseHeaders()
	}
	err := s.send(out)
	if h.GetEndOfStream() {
		s.finish()
	}
	return err
}

func (s *reqStream) responseBody(b *extprocv3.HttpBody) error {
	if s.respDone && b.GetEndOfStream() && len(b.GetBody()) == 0 {
		s.p.m.skip(skipDuplicateEOS)
		return nil
	}
	// The chunk goes on first: a mark may wait (for replicas, MarkSync).
	err := s.send(streamedBody(false, b.GetBody(), b.GetEndOfStream()))
	if !s.prefilled {
		s.prefilled = true
		s.mark(false)
	}
	if b.GetEndOfStream() {
		s.finish()
	}
	return err
}

// finish marks the request finished, once.
func (s *reqStream) finish() {
	s.respDone = true
	if s.requestID != "" {
		s.mark(true)
		s.requestID = ""
	}
}

// mark sends the router a prefill-done or finished mark for the request.
func (s *reqStream) mark(finished bool) {
	if s.requestID == "" {
		return
	}
	ref := &kvrouterv1.RequestRef{RequestId: s.requestID}
	ctx, cancel := context.WithTimeout(context.Background(), markTimeout) // outlives the stream
	defer cancel()
	var err error
	if finished {
		_, err = s.p.cfg.Router.MarkFinished(ctx, ref)
	} else {
		_, err = s.p.cfg.Router.MarkPrefillDone(ctx, ref)
	}
	if err != nil {
		s.p.m.skip(skipMarkFailed)
		s.p.cfg.Logger.Debug("epp: mark refused", "request_id", s.requestID, "finished", finished, "err", err)
	}
}

// close ends the stream: a request still holding load is finished (the
// stream was cancelled or failed), and the body buffer is let go.
func (s *reqStream) close() {
	s.finish()
	if len(s.body) > 0 {
		s.release()
	}
}
