package epp

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Picker serves envoy.service.ext_proc.v3.ExternalProcessor.
type Picker struct {
	extprocv3.UnimplementedExternalProcessorServer

	cfg     Config
	m       *metrics
	slots   chan struct{} // one per stream served, MaxStreams
	prefix  string
	nextID  atomic.Uint64
	nextAny atomic.Uint64 // round robin of header-only picks
}

// New returns a Picker for cfg.
func New(cfg Config) (*Picker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	prefix := cfg.RequestIDPrefix
	if prefix == "" {
		var b [6]byte
		rand.Read(b[:])
		prefix = "epp-" + hex.EncodeToString(b[:]) + "-"
	}
	return &Picker{cfg: cfg, m: m, slots: make(chan struct{}, cfg.MaxStreams), prefix: prefix}, nil
}

// Register registers the picker's service on g.
func (p *Picker) Register(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, p) }

// Process serves one HTTP request's stream.
func (p *Picker) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	select {
	case p.slots <- struct{}{}:
	default:
		p.m.answered(p.cfg.BusyStatus)
		return stream.Send(immediate(p.cfg.BusyStatus, "the endpoint picker serves --epp-max-streams streams already"))
	}
	p.m.streams.Inc()
	defer func() { <-p.slots; p.m.streams.Dec() }()
	s := &reqStream{p: p, send: stream.Send, ctx: stream.Context()}
	defer s.close()
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		}
		done, err := s.handle(req)
		if err != nil || done {
			return err
		}
	}
}

// requestID is a new request id, unique to the process.
func (p *Picker) requestID() string {
	return p.prefix + strconv.FormatUint(p.nextID.Add(1), 36)
}

// markTimeout bounds a mark's wait (with replicas, for MarkSync): a stream
// never waits on it longer.
const markTimeout = 5 * time.Second
