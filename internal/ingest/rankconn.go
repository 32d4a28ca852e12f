package ingest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/go-zeromq/zmq4"
)

// connectLoop dials the engine, reads until the connection fails, and
// dials again with exponential backoff and jitter.
func (r *rank) connectLoop() {
	defer r.wg.Done()
	backoff := r.backoffMin
	for r.ctx.Err() == nil {
		nc, err := r.dialer.DialContext(r.ctx, r.ep.network(), r.ep.Address)
		if err == nil {
			var c *zmtpConn
			c, err = r.open(nc, false)
			if err == nil {
				backoff = r.backoffMin
				r.live.Store(true)
				r.serve(c)
				r.live.Store(false)
				continue
			}
			nc.Close()
			r.drop(dropHandshake, err)
		}
		if r.ctx.Err() != nil {
			return
		}
		r.log.Debug("kv events: connect failed", "endpoint", r.ep.String(), "err", err, "retry_in", backoff)
		wait := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, r.backoffMax)
	}
}

// acceptLoop accepts engine connections in bind mode.
func (r *rank) acceptLoop() {
	defer r.wg.Done()
	for {
		nc, err := r.ln.Accept()
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			r.log.Warn("kv events: accept failed", "endpoint", r.ep.String(), "err", err)
			t := time.NewTimer(r.backoffMin)
			select {
			case <-r.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		// One publisher at a time, and a few handshakes in progress: a
		// peer that connects again and again, or a crowd of silent ones,
		// costs a refused connection each.
		if r.live.Load() {
			nc.Close()
			r.drop(dropPublisher, nil)
			continue
		}
		select {
		case r.handshakes <- struct{}{}:
		default:
			nc.Close()
			r.drop(dropHandshakes, nil)
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			c, err := r.open(nc, true)
			<-r.handshakes
			if err != nil {
				nc.Close()
				r.drop(dropHandshake, err)
				return
			}
			if !r.live.CompareAndSwap(false, true) {
				nc.Close()
				r.drop(dropPublisher, nil)
				return
			}
			defer r.live.Store(false)
			r.serve(c)
		}()
	}
}

// Reasons a connection is refused or dropped (connections_dropped_total).
const (
	dropPublisher  = iota // a bound rank already has a live publisher
	dropHandshakes        // too many handshakes in progress on a bound rank
	dropHandshake         // the handshake failed or timed out
	dropStalled           // a message stopped arriving part-way (FrameTimeout)
	numDropReasons
)

var dropReasons = [numDropReasons]string{"second_publisher", "handshakes", "handshake", "stalled"}

// drop counts a connection refused or dropped for reason.
func (r *rank) drop(reason int, err error) {
	if r.ctx.Err() != nil {
		return // stopping: the rank closed it
	}
	r.dropped.Add(1)
	if r.met != nil {
		r.met.dropped[reason].Inc()
	}
	if r.logLimit.allow() {
		r.log.Warn("kv events: connection dropped", "endpoint", r.ep.String(), "reason", dropReasons[reason], "err", err)
	}
}

// open performs the SUB handshake and subscribes.
func (r *rank) open(nc net.Conn, server bool) (*zmtpConn, error) {
	stop := context.AfterFunc(r.ctx, func() { nc.Close() })
	defer stop()
	c, err := handshakeZMTP(nc, zmq4.Sub, server, r.lim)
	if err != nil {
		return nil, err
	}
	if err := c.subscribe(r.topic); err != nil {
		return nil, err
	}
	return c, nil
}

// serve reads one connection until it fails or the rank stops.
func (r *rank) serve(c *zmtpConn) {
	nc := c.nc
	stop := context.AfterFunc(r.ctx, func() { nc.Close() })
	defer stop()
	defer nc.Close()

	if r.everConnected.Swap(true) {
		r.reconnects.Add(1)
	}
	r.conns.Add(1)
	r.log.Info("kv events: connected", "endpoint", r.ep.String())
	defer func() {
		r.conns.Add(-1)
		if r.ctx.Err() == nil {
			r.log.Warn("kv events: disconnected", "endpoint", r.ep.String())
		}
	}()

	if !r.push(item{connected: true}) {
		return
	}
	for {
		f, n, cmd, err := c.recv()
		switch {
		case errors.Is(err, errMessageTooLarge):
			r.malformedMsg("size", "%v; dropping the connection", err)
			return
		case errors.Is(err, errStalled):
			r.drop(dropStalled, err)
			return
		case err != nil:
			return
		case cmd:
			continue // PING is answered by recv; other commands carry nothing for us
		}
		if n != 3 {
			r.malformedMsg("frames", "message with %d frames, want 3", n)
			continue
		}
		if len(f[1]) != 8 {
			r.malformedMsg("seq", "seq frame of %d bytes, want 8", len(f[1]))
			continue
		}
		if !bytes.HasPrefix(f[0], r.topic) {
			r.malformedMsg("topic", "topic %q does not match prefix %q", f[0], r.topic)
			continue
		}
		if r.met != nil {
			r.met.bytes.Add(float64(len(f[2])))
		}
		it := item{seq: binary.BigEndian.Uint64(f[1]), topic: f[0], payload: f[2]}
		if !r.takeBudget(&it) || !r.push(it) {
			r.budget.give(it.budget)
			return
		}
	}
}

func (r *rank) malformedMsg(reason, format string, args ...any) {
	r.malformed.Add(1)
	r.decodeErrors.Add(1)
	if r.met != nil {
		r.met.malformed(reason).Inc()
	}
	if r.logLimit.allow() {
		r.log.Warn("kv events: malformed message skipped", "endpoint", r.ep.String(), "reason", reason,
			"detail", fmt.Sprintf(format, args...))
	}
}
