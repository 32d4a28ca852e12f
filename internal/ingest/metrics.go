package ingest

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/normalize"
)

// Index apply outcomes counted per rank.
const (
	applyParentNotFound = iota
	applyInvalid
	applyBlockNotFound
	applyOther
	numApplyErrors
)

var applyErrorNames = [numApplyErrors]string{"parent_not_found", "invalid", "block_not_found", "other"}

// eventKinds are the normalized event kinds by label.
var eventKinds = [...]struct {
	kind normalize.Kind
	name string
}{
	{normalize.KindStore, "store"},
	{normalize.KindStoreTier, "store_tier"},
	{normalize.KindRemove, "remove"},
	{normalize.KindClear, "clear"},
}

// malformedReasons are the frame-level reasons a message is skipped.
var malformedReasons = [...]string{"frames", "seq", "topic", "size"}

// batchStats accumulates what one batch did.
type batchStats struct {
	events        int
	byKind        [8]uint32 // by normalize.Kind
	blocksStored  uint64
	blocksRemoved uint64
	filtered      [normalize.NumReasons]uint32
	applyErrors   [numApplyErrors]uint32
	decodeErrors  int
	firstErr      error
	ts            float64
	dpMismatch    bool
	cleared       bool   // the batch cleared the rank's own blocks (AllBlocksCleared)
	parentZero    uint32 // stores whose parent 0 was taken for no parent
}

func (s *batchStats) reset() { *s = batchStats{} }

// metrics holds the ingest metric vectors, labeled by worker and dp_rank.
type metrics struct {
	batches, blocksStored, blocksRemoved, bytes, decodeErrors *prometheus.CounterVec
	dpMismatch, restores                                      *prometheus.CounterVec
	events, filtered, applyErrors, malformed, dropped         *prometheus.CounterVec
	lag                                                       *prometheus.GaugeVec
	queuedBytes                                               prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	wr := []string{"worker", "dp_rank"}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_ingest_" + name, Help: help}, append(wr, extra...))
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvrouter_ingest_" + name, Help: help}, wr)
	}
	m := &metrics{
		batches:       counter("batches_total", "KV event batches applied, by worker and rank."),
		blocksStored:  counter("blocks_stored_total", "Router blocks stored into the index."),
		blocksRemoved: counter("blocks_removed_total", "Engine blocks removed from the index."),
		bytes:         counter("bytes_total", "Payload bytes received on the live stream."),
		decodeErrors:  counter("decode_errors_total", "Batches or events that could not be decoded."),
		dpMismatch:    counter("dp_rank_mismatch_total", "Batches whose dp rank differs from the endpoint's rank (the batch's rank is used)."),
		restores:      counter("restores_total", "Ranks started from a snapshot, by outcome (restored, rebuilt, reset, kept, cleared).", "outcome"),
		events:        counter("events_total", "Normalized events applied, by type.", "type"),
		filtered:      counter("filtered_total", "Events or blocks filtered by the normalizer, by reason.", "reason"),
		applyErrors:   counter("apply_errors_total", "Events the index refused, by reason.", "reason"),
		malformed:     counter("malformed_total", "Messages skipped for their framing, by reason.", "reason"),
		dropped: counter("connections_dropped_total", "Connections refused or dropped for a limit, by reason "+
			"(second_publisher, handshakes, handshake, stalled).", "reason"),
		queuedBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvrouter_ingest_queued_bytes",
			Help: "Payload bytes queued across every rank (bounded by the queue budget)."}),
		lag: gauge("event_lag_seconds", "Now minus the timestamp of the last batch applied."),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.batches, m.blocksStored, m.blocksRemoved, m.bytes, m.decodeErrors,
			m.dpMismatch, m.restores, m.events, m.filtered, m.applyErrors, m.malformed, m.dropped,
			m.lag, m.queuedBytes} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// forget deletes every series of a worker.
func (m *metrics) forget(worker string) {
	l := prometheus.Labels{"worker": worker}
	for _, v := range []*prometheus.CounterVec{m.batches, m.blocksStored, m.blocksRemoved, m.bytes, m.decodeErrors,
		m.dpMismatch, m.restores, m.events, m.filtered, m.applyErrors, m.malformed, m.dropped} {
		v.DeletePartialMatch(l)
	}
	m.lag.DeletePartialMatch(l)
}

// rankMetrics are one rank's resolved series, so the hot path does no label
// lookups.
type rankMetrics struct {
	batches, blocksStored, blocksRemoved, bytes, decodeErrors prometheus.Counter
	dpMismatch                                                prometheus.Counter
	dropped                                                   [numDropReasons]prometheus.Counter
	events                                                    [8]prometheus.Counter // by normalize.Kind
	filtered                                                  [normalize.NumReasons]prometheus.Counter
	applyErrors                                               [numApplyErrors]prometheus.Counter
	malformedBy                                               [len(malformedReasons)]prometheus.Counter
	restores                                                  [numRestoreOutcomes]prometheus.Counter
	lag                                                       prometheus.Gauge
}

func (m *metrics) rank(worker string, dp uint32) *rankMetrics {
	r := strconv.FormatUint(uint64(dp), 10)
	rm := &rankMetrics{
		batches:       m.batches.WithLabelValues(worker, r),
		blocksStored:  m.blocksStored.WithLabelValues(worker, r),
		blocksRemoved: m.blocksRemoved.WithLabelValues(worker, r),
		bytes:         m.bytes.WithLabelValues(worker, r),
		decodeErrors:  m.decodeErrors.WithLabelValues(worker, r),
		dpMismatch:    m.dpMismatch.WithLabelValues(worker, r),
		lag:           m.lag.WithLabelValues(worker, r),
	}
	for _, k := range eventKinds {
		rm.events[k.kind] = m.events.WithLabelValues(worker, r, k.name)
	}
	for i := range rm.filtered {
		rm.filtered[i] = m.filtered.WithLabelValues(worker, r, normalize.Reason(i).String())
	}
	for i := range rm.applyErrors {
		rm.applyErrors[i] = m.applyErrors.WithLabelValues(worker, r, applyErrorNames[i])
	}
	for i, name := range malformedReasons {
		rm.malformedBy[i] = m.malformed.WithLabelValues(worker, r, name)
	}
	for i := range rm.dropped {
		rm.dropped[i] = m.dropped.WithLabelValues(worker, r, dropReasons[i])
	}
	for i := range rm.restores {
		rm.restores[i] = m.restores.WithLabelValues(worker, r, restoreOutcomes[i].name)
	}
	return rm
}

func (rm *rankMetrics) malformed(reason string) prometheus.Counter {
	for i, name := range malformedReasons {
		if name == reason {
			return rm.malformedBy[i]
		}
	}
	return rm.malformedBy[0]
}

// record adds one applied batch.
func (rm *rankMetrics) record(seq uint64, st *batchStats) {
	rm.batches.Inc()
	for _, k := range eventKinds {
		if n := st.byKind[k.kind]; n > 0 {
			rm.events[k.kind].Add(float64(n))
		}
	}
	if st.blocksStored > 0 {
		rm.blocksStored.Add(float64(st.blocksStored))
	}
	if st.blocksRemoved > 0 {
		rm.blocksRemoved.Add(float64(st.blocksRemoved))
	}
	for i, n := range st.filtered {
		if n > 0 {
			rm.filtered[i].Add(float64(n))
		}
	}
	for i, n := range st.applyErrors {
		if n > 0 {
			rm.applyErrors[i].Add(float64(n))
		}
	}
	if st.decodeErrors > 0 {
		rm.decodeErrors.Add(float64(st.decodeErrors))
	}
	if st.dpMismatch {
		rm.dpMismatch.Inc()
	}
	if st.ts > 0 {
		now := float64(time.Now().UnixNano()) / 1e9
		rm.lag.Set(now - st.ts)
	}
}
