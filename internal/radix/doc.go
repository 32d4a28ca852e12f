// Package radix is the router's index of cached KV blocks: a sharded radix tree
// keyed by router block hash, with per-worker/rank maps from engine block hash to
// tree node, per-tier residency counts, and lock-light concurrent prefix matches.
//
// It imports only internal/kv, the shared vocabulary.
package radix
