// Package persist keeps what the router knows across restarts: it writes
// snapshots of the index together with each rank's position in its engine's
// event stream, restores the newest valid snapshot on start, and holds the
// state directory (its lock and the durable registry).
//
// It composes three packages and reaches into none: internal/state owns the
// files and their format, internal/radix exports and imports the index, and
// internal/ingest pauses one rank at a time between batches so that a rank's
// blocks and its stream position are cut at the same point. Nothing stops
// globally while a snapshot is written: routing goes on, and each rank's
// events wait only while that rank is exported.
//
// It imports internal/state, internal/radix, internal/ingest and internal/kv.
package persist
