package cluster

import (
	"context"
	"time"
)

// Sync returns once every change published before the call (Publish) has
// reached the NATS server, which then holds it for the other replicas: a
// mark answered after Sync is not lost if this process dies right after.
// It asks the publisher to send at once, not after FlushInterval. It
// returns at once while the connection is down (the change goes out from
// the reconnect buffer, and a peer that missed it resyncs), and when the
// node stops (Close flushes what is queued). A confirmation that fails or
// times out (ConfirmTimeout) releases the waiters too, counted in
// kvrouter_cluster_confirm_failures_total: a replica whose server is slow
// still answers its marks.
func (n *Node) Sync(ctx context.Context) error {
	p := &n.pub
	p.mu.Lock()
	target := p.cut
	if p.nops > 0 {
		target++ // the change is in the batch not yet cut
	}
	if p.confirmed >= target || !n.Connected() {
		p.mu.Unlock()
		return nil
	}
	p.want = max(p.want, target)
	moved := p.moved
	p.mu.Unlock()
	signal(p.now)
	for {
		select {
		case <-moved:
		case <-n.stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
		if p.confirmed >= target {
			p.mu.Unlock()
			return nil
		}
		moved = p.moved
		p.mu.Unlock()
	}
}

// confirm, on the publisher's goroutine after a flush, asks the server for
// a round trip (a PING answered after every message before it) when a Sync
// waits for a batch cut by now, and then releases the waiters.
func (p *publisher) confirm() {
	p.mu.Lock()
	want, done, cut := p.want, p.confirmed, p.cut
	p.mu.Unlock()
	if want <= done {
		return
	}
	if !p.n.Connected() {
		p.release(cut) // Sync does not wait while the connection is down
		return
	}
	start := time.Now()
	if err := p.n.nc.FlushTimeout(p.n.cfg.ConfirmTimeout); err != nil {
		p.n.metrics.confirmFails.Inc()
		p.n.log.Debug("load changes not confirmed by the NATS server", "err", err)
	}
	p.n.metrics.confirmSeconds.Observe(time.Since(start).Seconds())
	p.release(cut)
}

// release marks the batches up to cut confirmed and wakes the waiters. A
// Sync that came in during the round trip for a later batch has signalled
// p.now, so the publisher flushes and confirms again.
func (p *publisher) release(cut uint64) {
	p.mu.Lock()
	p.confirmed = max(p.confirmed, cut)
	close(p.moved)
	p.moved = make(chan struct{})
	p.mu.Unlock()
}
