package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// endSeq is the replay end marker: seq -1 as eight 0xFF bytes.
var endSeq = []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

var errCacheCorrupt = errors.New("engine: cache list and index disagree")

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Endpoint is the PUB socket's bind address, e.g. "tcp://127.0.0.1:0"
	// (port 0 picks a free port; Endpoint() reports the one bound).
	Endpoint string
	// ReplayEndpoint is the ROUTER socket's bind address; empty disables replay.
	ReplayEndpoint string
	// Topic is sent as the first frame of every message.
	Topic string
	// ReplayBuffer is how many recent batches replay can serve (default 10,000).
	ReplayBuffer int
	// Logger receives malformed replay requests; nil discards.
	Logger *slog.Logger
}

// Publisher is the ZMQ side of a vLLM-style KV event publisher: a PUB socket
// sending [topic, seq (8 bytes big-endian), payload] and a ROUTER socket that
// answers a DEALER's ["", start_seq] with ["", topic, seq, payload] for every
// buffered batch with seq >= start_seq, then ["", topic, -1, ""].
type Publisher struct {
	topic  []byte
	logger *slog.Logger
	cancel context.CancelFunc

	mu       sync.Mutex // serializes seq assignment, send and buffer append
	pub      zmq4.Socket
	seq      uint64
	buf      []batchRec // ring of the last len(buf) batches
	bufStart int        // index of the oldest record
	bufLen   int

	replay   zmq4.Socket
	endpoint string
	replayEP string
	done     chan struct{}

	replayRequests uint64
	replayBad      uint64
}

type batchRec struct {
	seq     uint64
	payload []byte
}

// NewPublisher binds the PUB socket (and the ROUTER socket if configured).
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("publisher: empty endpoint")
	}
	if cfg.ReplayBuffer <= 0 {
		cfg.ReplayBuffer = 10000
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{
		topic:  []byte(cfg.Topic),
		logger: logger,
		cancel: cancel,
		done:   make(chan struct{}),
	}
	p.pub = zmq4.NewPub(ctx)
	if err := p.pub.Listen(cfg.Endpoint); err != nil {
		cancel()
		p.pub.Close()
		return nil, fmt.Errorf("publisher: bind pub %s: %w", cfg.Endpoint, err)
	}
	p.endpoint = boundEndpoint(cfg.Endpoint, p.pub.Addr())
	if cfg.ReplayEndpoint == "" {
		close(p.done)
		return p, nil
	}
	p.buf = make([]batchRec, cfg.ReplayBuffer)
	p.replay = zmq4.NewRouter(ctx, zmq4.WithTimeout(5*time.Second))
	if err := p.replay.Listen(cfg.ReplayEndpoint); err != nil {
		cancel()
		p.pub.Close()
		p.replay.Close()
		return nil, fmt.Errorf("publisher: bind replay %s: %w", cfg.ReplayEndpoint, err)
	}
	p.replayEP = boundEndpoint(cfg.ReplayEndpoint, p.replay.Addr())
	go p.serveReplay()
	return p, nil
}

// boundEndpoint replaces a port 0 in ep with the port actually bound.
func boundEndpoint(ep string, addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !strings.HasPrefix(ep, "tcp://") {
		return ep
	}
	i := strings.LastIndexByte(ep, ':')
	return ep[:i+1] + strconv.Itoa(tcp.Port)
}

// Endpoint is the PUB socket's bound address (with the real port), which a
// worker registers as is: the router dials a concrete host.
func (p *Publisher) Endpoint() string { return p.endpoint }

// ReplayEndpoint is the ROUTER socket's bound address, or "" without replay.
func (p *Publisher) ReplayEndpoint() string { return p.replayEP }

// Seq is the sequence number the next batch will carry.
func (p *Publisher) Seq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// Subscribed reports whether any subscriber is connected with a subscription.
func (p *Publisher) Subscribed() bool {
	t, ok := p.pub.(zmq4.Topics)
	return ok && len(t.Topics()) > 0
}

// Publish sends one payload as the next batch and keeps it for replay.
// The payload must not be modified afterwards.
func (p *Publisher) Publish(payload []byte) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.seq
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], seq)
	if err := p.pub.SendMulti(zmq4.NewMsgFrom(p.topic, sb[:], payload)); err != nil {
		return seq, fmt.Errorf("publish seq %d: %w", seq, err)
	}
	p.seq++
	if p.replay == nil {
		return seq, nil // nothing to replay to: keep no history
	}
	end := (p.bufStart + p.bufLen) % len(p.buf)
	p.buf[end] = batchRec{seq: seq, payload: payload}
	if p.bufLen < len(p.buf) {
		p.bufLen++
	} else {
		p.bufStart = (p.bufStart + 1) % len(p.buf)
	}
	return seq, nil
}

// serveReplay answers replay requests until Close.
func (p *Publisher) serveReplay() {
	defer close(p.done)
	for {
		msg, err := p.replay.Recv()
		if err != nil {
			return // socket closed
		}
		// ROUTER prepends the peer identity: [id, "", start_seq].
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 || len(msg.Frames[2]) != 8 {
			p.mu.Lock()
			p.replayBad++
			p.mu.Unlock()
			p.logger.Warn("malformed replay request", "frames", len(msg.Frames))
			continue
		}
		id := msg.Frames[0]
		start := binary.BigEndian.Uint64(msg.Frames[2])
		p.mu.Lock()
		p.replayRequests++
		recs := make([]batchRec, 0, p.bufLen)
		for i := 0; i < p.bufLen; i++ {
			r := p.buf[(p.bufStart+i)%len(p.buf)]
			if r.seq >= start {
				recs = append(recs, r)
			}
		}
		p.mu.Unlock()
		for _, r := range recs {
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], r.seq)
			if err := p.replay.SendMulti(zmq4.NewMsgFrom(id, nil, p.topic, sb[:], r.payload)); err != nil {
				p.logger.Warn("replay send", "err", err)
				break
			}
		}
		if err := p.replay.SendMulti(zmq4.NewMsgFrom(id, nil, p.topic, endSeq, nil)); err != nil {
			p.logger.Warn("replay end marker", "err", err)
		}
	}
}

// ReplayStats reports replay requests served and malformed requests skipped.
func (p *Publisher) ReplayStats() (served, malformed uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.replayRequests, p.replayBad
}

// Close closes both sockets.
func (p *Publisher) Close() error {
	p.cancel()
	err := p.pub.Close()
	if p.replay != nil {
		if e := p.replay.Close(); e != nil && err == nil {
			err = e
		}
	}
	<-p.done
	return err
}
