// Package scoring turns a prompt into a routing decision: it hashes the prompt
// with normalize's block hash, matches it against the radix index (plus a
// TTL-bounded overlay of the router's own recent decisions), and combines
// overlap with per-worker active load into a cost.
//
// One concept per file: config.go (Config and its defaults), router.go (the
// Router), registry.go (workers and their ranks per model), prompt.go
// (validating and hashing a prompt), candidates.go (matching a prompt and
// costing each rank), score.go (Score), route.go (Route and what it records),
// decision.go (what Route answers), sample.go (choosing among the costs),
// load.go (active requests) and overlay.go (predicted blocks).
//
// It imports internal/radix, internal/normalize and internal/kv.
package scoring
