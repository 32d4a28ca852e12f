// Package scoring turns a prompt into a routing decision: it hashes the prompt
// with normalize's block hash, matches it against the radix index (plus a
// TTL-bounded overlay of the router's own recent decisions), and combines
// overlap with per-worker active load into a cost.
//
// It imports internal/radix, internal/normalize and internal/kv.
package scoring
