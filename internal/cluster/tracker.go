package cluster

import (
	"slices"
	"time"
)

// tracker follows, for each other replica (origin), the sequence of its
// changes messages, and decides what a receiver does with each: apply it,
// drop it as a duplicate, or apply it and ask the origin for its whole
// state because changes were (or may have been) missed. It does no I/O.
type tracker struct {
	origins map[string]*originState
}

// maxOrigins bounds the origins followed: a cluster is a few replicas, and
// a peer sending under ever new ids must not grow the tracker (and the
// resync queue) without end. A message of an origin past it is refused.
const maxOrigins = 1024

type originState struct {
	epoch    uint64
	seq      uint64 // last seq applied (or covered by a state reply)
	mismatch int    // consecutive digests that disagreed
	lastSeen time.Time
	routed   time.Time // when a Route of its arrived last (zero: none)
}

// verdict is what to do with a message.
type verdict struct {
	apply  bool
	resync string // non-empty: ask the origin for its state, for this reason
	full   bool   // a new origin past maxOrigins: refused
}

// Reasons to resynchronise.
const (
	resyncNew       = "new"       // an origin first heard mid-stream
	resyncEpoch     = "epoch"     // the origin restarted mid-stream
	resyncGap       = "gap"       // a seq was skipped
	resyncDigest    = "digest"    // digests disagreed twice running
	resyncLost      = "lost"      // a reconnect or a slow consumer: anything may be missed
	resyncBootstrap = "bootstrap" // this replica just started
	resyncHeld      = "held"      // changes during a state fetch were too many to keep
)

func newTracker() *tracker { return &tracker{origins: make(map[string]*originState)} }

// changes judges a changes message of origin.
func (t *tracker) changes(origin string, epoch, seq uint64, now time.Time) verdict {
	o := t.origins[origin]
	switch {
	case o == nil && len(t.origins) >= maxOrigins:
		return verdict{full: true}
	case o == nil:
		t.origins[origin] = &originState{epoch: epoch, seq: seq, lastSeen: now}
		if seq == 1 {
			return verdict{apply: true} // its first message: nothing before it to miss
		}
		return verdict{apply: true, resync: resyncNew}
	case epoch < o.epoch:
		// A late message of the process the origin's id had before (its
		// requests are known by that epoch): applied, but not followed,
		// else the two processes' seqs would alternate and each look like
		// a restart.
		return verdict{apply: true}
	case epoch > o.epoch:
		*o = originState{epoch: epoch, seq: seq, lastSeen: now}
		if seq == 1 {
			return verdict{apply: true}
		}
		return verdict{apply: true, resync: resyncEpoch}
	}
	o.lastSeen = now
	switch {
	case seq <= o.seq:
		return verdict{}
	case seq == o.seq+1:
		o.seq = seq
		return verdict{apply: true}
	}
	o.seq = seq
	return verdict{apply: true, resync: resyncGap}
}

// digest compares an origin's digest, sent with seq, with the receiver's
// sum of that origin's requests after applying seq. One disagreement can be
// a change in flight (a mark made on a third replica reaches the two at
// different times); two running call for a resync.
func (t *tracker) digest(origin string, epoch uint64, remote, local Digest) verdict {
	o := t.origins[origin]
	if o == nil || o.epoch != epoch {
		return verdict{}
	}
	if remote == local {
		o.mismatch = 0
		return verdict{}
	}
	o.mismatch++
	if o.mismatch < 2 {
		return verdict{}
	}
	o.mismatch = 0
	return verdict{resync: resyncDigest}
}

// synced records a state reply of origin taken at seq: messages up to seq
// are covered by it.
func (t *tracker) synced(origin string, epoch, seq uint64, now time.Time) {
	o := t.origins[origin]
	if o != nil && epoch < o.epoch {
		return // the process before: its seqs are not followed
	}
	if o == nil && len(t.origins) >= maxOrigins {
		return
	}
	if o == nil || o.epoch != epoch {
		t.origins[origin] = &originState{epoch: epoch, seq: seq, lastSeen: now}
		return
	}
	o.seq = max(o.seq, seq)
	o.mismatch = 0
	o.lastSeen = now
}

// known returns the origins heard from, sorted: after a reconnect each is
// asked for its state.
func (t *tracker) known() []string {
	out := make([]string, 0, len(t.origins))
	for id := range t.origins {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// routedAt records that a message of origin carried a Route made at about
// now.
func (t *tracker) routedAt(origin string, now time.Time) {
	if o := t.origins[origin]; o != nil {
		o.routed = now
	}
}

// routingPlace is self's place (0-based, by id) among itself and the
// origins a Route of which arrived within window before now (the replicas
// deciding beside it), and their number. It counts rather than lists, for
// every Route asks it.
func (t *tracker) routingPlace(self string, now time.Time, window time.Duration) (place, replicas int) {
	replicas = 1
	for id, o := range t.origins {
		if id == self || o.routed.IsZero() || now.Sub(o.routed) > window {
			continue
		}
		replicas++
		if id < self {
			place++
		}
	}
	return place, replicas
}

// decider is the replica deciding for the cluster (decide.go): the
// longest-running, by the smallest epoch (a process's start) and ties by
// id, of self and the origins heard from within live before now.
func (t *tracker) decider(self string, selfEpoch uint64, now time.Time, live time.Duration) string {
	best, bestEpoch := self, selfEpoch
	for id, o := range t.origins {
		if id == self || now.Sub(o.lastSeen) > live {
			continue
		}
		if o.epoch < bestEpoch || o.epoch == bestEpoch && id < best {
			best, bestEpoch = id, o.epoch
		}
	}
	return best
}

// prune forgets the origins not heard from for idle (a replica that
// stopped), and returns them.
func (t *tracker) prune(now time.Time, idle time.Duration) []string {
	var gone []string
	for id, o := range t.origins {
		if now.Sub(o.lastSeen) > idle {
			gone = append(gone, id)
			delete(t.origins, id)
		}
	}
	slices.Sort(gone)
	return gone
}
