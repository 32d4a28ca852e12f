// Package ingest keeps one ZeroMQ subscription per registered worker and
// data-parallel rank, checks frames and sequence numbers, replays gaps, survives
// engine and network restarts, and applies each rank's normalized events to the
// index in order.
//
// It imports internal/normalize, internal/radix and internal/kv.
package ingest
