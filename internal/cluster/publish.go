package cluster

import (
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/scoring"
)

// publisher batches this replica's load changes and publishes them on
// <prefix>.load.<replica>. Publish (the Router's OnChange) only appends to
// a buffer; one goroutine flushes it FlushInterval after its first change,
// or at once when it reaches MaxBatchBytes, and publishes a heartbeat with
// the replica's digest every HeartbeatInterval.
type publisher struct {
	n *Node

	mu       sync.Mutex
	ops      []byte // encoded changes waiting
	nops     int
	seq      uint64 // of the last batch published
	skip     bool   // changes were dropped: the next batch skips a seq so peers resync
	spare    []byte
	overflow int // ops bytes past which changes are dropped

	flushed time.Time // last flush; the flushing goroutine's

	// Confirmation (confirm.go): batches cut, the cut count the server has
	// confirmed receiving, the count Sync callers wait for, and a channel
	// closed (and replaced) when confirmed moves.
	cut       uint64
	confirmed uint64
	want      uint64
	moved     chan struct{}

	kick chan struct{} // a first change is waiting
	full chan struct{} // the buffer reached MaxBatchBytes
	now  chan struct{} // a Sync waits: flush and confirm without batching
}

func (p *publisher) init(n *Node) {
	p.n = n
	p.kick = make(chan struct{}, 1)
	p.full = make(chan struct{}, 1)
	p.now = make(chan struct{}, 1)
	p.moved = make(chan struct{})
	p.overflow = max(64*n.cfg.MaxBatchBytes, 8<<20)
}

// publish queues c. It never blocks on the network: it is called on the
// Route's path.
func (p *publisher) publish(c *scoring.LoadChange) {
	p.mu.Lock()
	if len(p.ops) >= p.overflow {
		p.skip = true
		p.mu.Unlock()
		p.n.metrics.dropped.Inc()
		return
	}
	p.ops = appendChange(p.ops, c)
	p.nops++
	first, full := p.nops == 1, len(p.ops) >= p.n.cfg.MaxBatchBytes
	p.mu.Unlock()
	switch {
	case full:
		signal(p.full)
	case first:
		signal(p.kick)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run flushes until the node stops, then flushes what is left.
func (p *publisher) run() {
	hb := time.NewTicker(p.n.cfg.HeartbeatInterval)
	defer hb.Stop()
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	for {
		select {
		case <-p.n.stop:
			p.flush(false)
			p.confirm()
			return
		case <-hb.C:
			p.flush(true)
		case <-p.full:
			p.flush(false)
		case <-p.now:
			p.flush(false)
		case <-p.kick:
			// A change after a quiet spell goes out at once; changes that
			// follow within FlushInterval of a flush wait to be batched.
			if rest := p.n.cfg.FlushInterval - time.Since(p.flushed); rest > 0 {
				wait.Reset(rest)
				select {
				case <-wait.C:
				case <-p.full:
					wait.Stop()
				case <-p.now:
					wait.Stop()
				case <-p.n.stop:
					wait.Stop()
				}
			}
			p.flush(false)
		}
		p.confirm()
	}
}

// flush publishes the waiting changes as one batch; with heartbeat, also
// when there are none, with the replica's digest.
func (p *publisher) flush(heartbeat bool) {
	var dg Digest
	ls := p.n.sync.state()
	withDigest := heartbeat && ls != nil
	if withDigest {
		// Taken before the batch is cut: a change made in between is in
		// the digest but not the batch, which the receiver's tracker
		// tolerates once (see tracker.digest).
		cnt, sum := ls.LoadDigest("")
		dg = Digest{Count: uint64(cnt), Sum: sum}
	}
	p.mu.Lock()
	// Without a load state (not shared, or not yet) a heartbeat carries
	// nothing: no empty message every interval.
	if p.nops == 0 && (!heartbeat || ls == nil) {
		p.mu.Unlock()
		return
	}
	p.seq++
	p.cut++
	if p.skip {
		p.seq++
		p.skip = false
	}
	h := Header{Kind: kindChanges, Origin: p.n.cfg.ReplicaID, Epoch: p.n.epoch, Seq: p.seq, HasDigest: withDigest, Digest: dg}
	msg := appendHeader(p.spare[:0], &h, p.nops)
	msg = append(msg, p.ops...)
	n := p.nops
	p.ops, p.nops = p.ops[:0], 0
	p.mu.Unlock()

	if err := p.n.nc.Publish(p.n.loadSubject(p.n.cfg.ReplicaID), msg); err != nil {
		// Disconnected past the reconnect buffer: the peers see the seq
		// gap when the connection is back, and resync.
		p.n.metrics.dropped.Add(float64(n))
	} else {
		p.n.metrics.messages.WithLabelValues("out").Inc()
		p.n.metrics.bytes.WithLabelValues("out").Add(float64(len(msg)))
		p.n.metrics.changes.WithLabelValues(changeSent).Add(float64(n))
	}
	p.mu.Lock()
	p.spare = msg // Publish copied it
	p.mu.Unlock()
	p.flushed = time.Now()
}

// lastSeq is the seq of the last batch published.
func (p *publisher) lastSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// Publish is the scoring Router's OnChange: it queues a change for the
// other replicas.
func (n *Node) Publish(c scoring.LoadChange) { n.pub.publish(&c) }
