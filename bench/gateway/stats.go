package gateway

import "sync/atomic"

// Stats are a gateway's running totals.
type Stats struct {
	// Requests counts requests received.
	Requests int64 `json:"requests"`
	// Picked counts requests forwarded to the picker's endpoint.
	Picked int64 `json:"picked"`
	// Immediate counts the picker's immediate responses passed through.
	Immediate int64 `json:"immediate"`
	// FailedOpen and FailedClosed count requests the picker could not
	// take, forwarded round robin or answered 503.
	FailedOpen   int64 `json:"failed_open"`
	FailedClosed int64 `json:"failed_closed"`
	// UpstreamErrors counts requests no upstream answered.
	UpstreamErrors int64 `json:"upstream_errors"`
	// ProtocolErrors counts picker answers out of protocol, and picker
	// failures after the pick (the response is cut short).
	ProtocolErrors int64 `json:"protocol_errors"`
}

type counters struct {
	requests, picked, immediate, failedOpen, failedClosed, upstreamErrors, protocolErrors atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Requests: c.requests.Load(), Picked: c.picked.Load(), Immediate: c.immediate.Load(),
		FailedOpen: c.failedOpen.Load(), FailedClosed: c.failedClosed.Load(),
		UpstreamErrors: c.upstreamErrors.Load(), ProtocolErrors: c.protocolErrors.Load(),
	}
}
