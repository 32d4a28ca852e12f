// Package radix is the router's index of cached KV blocks: a sharded radix tree
// keyed by router block hash, with per-worker/rank maps from engine block hash to
// tree node, per-tier residency counts, and lock-light concurrent prefix matches.
//
// It imports only internal/kv, the shared vocabulary.
//
// Where things are (README.md has the design):
//
//   - index.go: Index, Config and Stats; segment.go: how a path is cut into
//     segments and a segment picks its shard.
//   - store.go (Store), update.go (StoreTier, Remove), clear.go (Clear,
//     RemoveWorker): the write path, one segment or shard at a time.
//   - match.go (Match and its walk over the nodes) and active.go (the
//     workers still matching, as bitmaps, merged with each new holder set).
//   - shard.go: a shard and its lock; node.go: its node arena and how a
//     node's child is found; pathkey.go: the nodes' path keys.
//   - hset.go: interned, reference-counted holder sets and a node's move from
//     one to another; entry.go: a holder entry; setbits.go: a set kept as
//     bitmaps; derive.go: the set that one entry's change makes; spare.go:
//     the pool of freed sets' arrays.
//   - worker.go, binding.go, registry.go: a worker's engine hashes, where each
//     is bound, and the dense worker slots Match reports (reused after
//     RemoveWorker once no Match can report them: see registry).
//   - u64map.go: the open-addressing map of the write path (keys mixed by
//     kv.Mix keyed with the index's secret seed, Config.Seed).
//   - export.go, import.go: the index's side of a snapshot (Exporter,
//     Importer).
//   - invariants.go: CheckInvariants, which tests run after every call.
package radix
