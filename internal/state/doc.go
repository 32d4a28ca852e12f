// Package state owns the router's state directory: its lock, the on-disk
// formats of what the router keeps across restarts, and the file discipline
// that keeps them whole (atomic replace, fsync of file and directory, refusal
// of bad files, which are moved aside and kept for inspection).
//
// It imports only internal/kv, the shared vocabulary.
//
// # Layout of a state directory
//
//	LOCK                          flock held by the running router (holds its pid)
//	registry.log                  the durable worker registry (see Registry)
//	snapshot-<seq>.kvs            index snapshots, newest and previous (see Snapshots)
//	<name>.bad-<unix-time>[-n]    a refused file, kept aside for inspection
//	<name>.<random>.tmp           a write in progress; removed when the dir is opened
//
// # Pieces
//
//   - Dir (dir.go, lock_*.go): opens the directory and holds its lock.
//   - Dir.WriteFile (atomic.go): temp file, write, fsync, rename, fsync the directory.
//   - Registry (registry*.go): an append-only checksummed journal of worker
//     records, compacted on open.
//   - Writer, ReadSnapshot and its Visitor (snapshot_*.go): the streaming
//     snapshot format, the index as nodes (by path key, shared by ranks)
//     and each rank's bindings of engine hashes to them.
//   - Snapshots (snapshots.go): snapshot files, newest and previous, with fallback.
//   - frame.go: the file header and checksummed frames both formats share.
//
// # Bad files
//
// Every read checks a CRC32C per frame (registry record or snapshot chunk)
// before decoding a byte of it, and a snapshot's trailer carries counts and a
// checksum of the whole file. A file that fails is refused with an error
// naming it and the reason, wrapping ErrCorrupt, ErrTruncated or
// ErrFutureVersion; the caller starts from what is valid (the registry's
// valid prefix, the previous snapshot, or nothing) and the bad file is
// renamed to <name>.bad-<unix-time> (a Refusal says where).
package state
