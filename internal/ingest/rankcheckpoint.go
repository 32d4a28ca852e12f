package ingest

import (
	"github.com/kvrouter/kvrouter/internal/kv"
)

// pause is Checkpoint's hold on a rank's applier, between two batches.
type pause struct {
	pos    Position
	ranks  []kv.WorkerRank
	held   chan struct{} // closed by the applier once pos and ranks are set
	resume chan struct{} // closed by Checkpoint when it is done with the rank
}

// hold serves p: it reports the rank's position and the index ranks it
// writes to, then applies nothing until Checkpoint resumes it or the rank
// stops (a rank removed meanwhile does not wait for Checkpoint).
func (r *rank) hold(p *pause) {
	p.pos = r.position()
	p.ranks = append(p.ranks, kv.WorkerRank{ID: r.worker, DPRank: r.dp})
	for _, dp := range r.sink.otherRanks() {
		p.ranks = append(p.ranks, kv.WorkerRank{ID: r.worker, DPRank: dp})
	}
	close(p.held)
	select {
	case <-p.resume:
	case <-r.ctx.Done():
	}
}

// between serves a waiting Checkpoint, if any, between two replay replies:
// a long replay does not hold a checkpoint up, and what it applied so far
// is a cut like any other.
func (r *rank) between() {
	select {
	case p := <-r.pauses:
		r.hold(p)
	default:
	}
}

// position is what the rank has applied: the index holds its blocks as of
// this.
func (r *rank) position() Position {
	s := &r.seq
	p := Position{HasSeq: s.held.ok, Epoch: string(s.epoch)}
	if s.held.ok {
		p.Seq, p.Sum = s.held.last, s.held.sum
	}
	return p
}

// checkpoint pauses the applier between two batches and calls fn with its
// position. It returns errRankStopped, without calling fn, when the rank
// stops first.
func (r *rank) checkpoint(fn func(kv.WorkerRank, Position, []kv.WorkerRank) error) error {
	p := &pause{held: make(chan struct{}), resume: make(chan struct{})}
	select {
	case r.pauses <- p:
	case <-r.ctx.Done():
		return errRankStopped
	}
	defer close(p.resume)
	select {
	case <-p.held:
	case <-r.ctx.Done():
		// Stopping: p, if taken, is resumed by the deferred close.
		return errRankStopped
	}
	return fn(kv.WorkerRank{ID: r.worker, DPRank: r.dp}, p.pos, p.ranks)
}
