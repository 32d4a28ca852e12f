package ingest

import (
	"sync/atomic"
	"time"
)

// status reports the rank's counters.
func (r *rank) status() RankStatus {
	return RankStatus{
		DPRank:          r.dp,
		Connected:       r.conns.Load() > 0,
		LastSeq:         r.lastSeq.Load(),
		EventsApplied:   r.eventsApplied.Load(),
		Gaps:            r.gaps.Load(),
		Replays:         r.replays.Load(),
		ReplayFailures:  r.replayFailures.Load(),
		EngineRestarts:  r.restarts.Load(),
		Reconnects:      r.reconnects.Load(),
		DecodeErrors:    r.decodeErrors.Load(),
		Dropped:         r.dropped.Load(),
		CatchUpsLimited: r.limited.Load(),
		BudgetWaits:     r.budgetWaits.Load(),
		CachedBlocks:    r.sink.cached(),
		Restore:         restoreName(r.restore.Load()),
		CaughtUp:        r.caughtUp.Load(),
		Inexact:         r.inexact.Load(),
		InexactSinceSeq: r.inexactSince.Load(),
		CapacityBlocks:  r.capBlocks.Load(),
		Evictions:       r.evictions.Load(),
		Problems:        r.probs.snapshot(),
	}
}

// restoreName names a stored restore outcome ("" when none was decided).
func restoreName(v uint32) string {
	if v == 0 {
		return ""
	}
	return restoreOutcomes[v-1].name
}

// rateLimit allows one log line per interval.
type rateLimit struct {
	next atomic.Int64
}

func (l *rateLimit) allow() bool {
	now := time.Now().UnixNano()
	n := l.next.Load()
	return now >= n && l.next.CompareAndSwap(n, now+int64(10*time.Second))
}
