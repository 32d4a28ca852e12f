package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Gateway is an http.Handler that routes every request through the
// endpoint picker. It is safe for concurrent use.
type Gateway struct {
	cfg    Config
	conn   *grpc.ClientConn
	client extprocv3.ExternalProcessorClient
	rr     atomic.Uint64
	c      counters
}

// New returns a gateway for cfg. It does not connect until the first request.
func New(cfg Config) (*Gateway, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(cfg.PickerAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("gateway: endpoint picker %s: %w", cfg.PickerAddr, err)
	}
	return &Gateway{cfg: cfg, conn: cc, client: extprocv3.NewExternalProcessorClient(cc)}, nil
}

// Close closes the connection to the picker.
func (g *Gateway) Close() error { return g.conn.Close() }

// Stats returns the running totals.
func (g *Gateway) Stats() Stats { return g.c.snapshot() }

// ServeHTTP routes one request.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.c.requests.Add(1)
	if r.ContentLength > int64(g.cfg.MaxBodyBytes) {
		// The gateway's own buffer limit, as Envoy's per-route limit; the
		// picker's (smaller) limit answers 413 through the stream.
		writeError(w, http.StatusRequestEntityTooLarge, "request body over the gateway's limit")
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	body := &bodyCopy{done: make(chan struct{})}
	st, err := g.client.Process(ctx)
	if err != nil {
		go body.read(r.Body, g.cfg.ChunkBytes, g.cfg.MaxBodyBytes, nil)
		g.pickerDown(w, r, body, err)
		return
	}
	go body.read(r.Body, g.cfg.ChunkBytes, g.cfg.MaxBodyBytes, &requestSender{st: st, r: r, abort: cancel})
	first, err := recvWithin(ctx, st, g.cfg.PickTimeout)
	if err != nil {
		cancel() // ends the stream, so the body's sender stops sending
		g.pickerDown(w, r, body, err)
		return
	}
	x := &exchange{g: g, w: w, r: r, st: st, body: body, cancel: cancel}
	x.run(first)
}

// recvWithin receives the stream's next answer, failing after d.
func recvWithin(ctx context.Context, st extprocv3.ExternalProcessor_ProcessClient, d time.Duration) (*extprocv3.ProcessingResponse, error) {
	type answer struct {
		r   *extprocv3.ProcessingResponse
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		r, err := st.Recv()
		ch <- answer{r, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case a := <-ch:
		return a.r, a.err
	case <-t.C:
		return nil, fmt.Errorf("no answer from the endpoint picker within %v", d)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pickerDown answers a request the picker could not take: round robin over
// the upstreams when failing open, else 503.
func (g *Gateway) pickerDown(w http.ResponseWriter, r *http.Request, body *bodyCopy, cause error) {
	if r.Context().Err() != nil {
		return // the client left
	}
	select {
	case <-body.done:
		if body.tooLarge { // the stream was ended for it
			writeError(w, http.StatusRequestEntityTooLarge, "request body over the gateway's limit")
			return
		}
	default:
	}
	if !g.cfg.FailOpen {
		g.c.failedClosed.Add(1)
		g.cfg.Logger.Warn("endpoint picker unavailable; failing closed", "err", cause)
		writeError(w, http.StatusServiceUnavailable, "endpoint picker unavailable")
		return
	}
	g.c.failedOpen.Add(1)
	<-body.done
	if body.tooLarge {
		writeError(w, http.StatusRequestEntityTooLarge, "request body over the gateway's limit")
		return
	}
	if body.err != nil {
		writeError(w, http.StatusBadRequest, "reading the request body: "+body.err.Error())
		return
	}
	up := g.cfg.Upstreams[g.rr.Add(1)%uint64(len(g.cfg.Upstreams))]
	g.cfg.Logger.Warn("endpoint picker unavailable; failing open", "upstream", up, "err", cause)
	resp, err := g.forward(r, []string{up}, nil, body.bytes())
	if err != nil {
		g.c.upstreamErrors.Add(1)
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// bodyCopy reads the client's body, sending each chunk to the picker (when
// there is one) and keeping a copy for failing open.
type bodyCopy struct {
	mu       sync.Mutex
	buf      []byte
	tooLarge bool
	err      error
	done     chan struct{}
	sendErr  error // the first send that failed
}

func (b *bodyCopy) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf
}

// read copies body in chunks; once the picker's stream fails it goes on
// copying for fail-open. It closes b.done when the body has been read.
func (b *bodyCopy) read(body io.Reader, chunk, limit int, s *requestSender) {
	defer func() {
		close(b.done)
		if b.tooLarge && s != nil {
			s.abort() // the picker waits for a body end that will not come
		}
	}()
	if s != nil {
		if err := s.headers(); err != nil {
			b.sendErr, s = err, nil
		}
	}
	if s != nil && s.headerOnly() {
		return
	}
	p := make([]byte, chunk)
	for {
		n, err := io.ReadFull(body, p)
		eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !eof {
			b.err = err
			return
		}
		b.mu.Lock()
		if len(b.buf)+n > limit {
			b.tooLarge = true
			b.mu.Unlock()
			return
		}
		b.buf = append(b.buf, p[:n]...)
		b.mu.Unlock()
		if s != nil && (n > 0 || eof) {
			if err := s.body(p[:n], eof); err != nil {
				b.sendErr, s = err, nil
			}
		}
		if eof {
			return
		}
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, "{\"error\":{\"message\":%q,\"type\":%q,\"code\":%d}}\n", msg, http.StatusText(status), status)
}

// hopByHop are headers a proxy does not forward.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		if hopByHop[k] {
			continue
		}
		dst[k] = append(dst[k][:0:0], vs...)
	}
}

// splitEndpoints splits the picker's comma-separated fallback list.
func splitEndpoints(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
