package normalize

import (
	"bytes"

	"github.com/cespare/xxhash/v2"
)

// Cache namespaces (cache salts) keep tenants' identical prompts apart: a
// store names its namespace explicitly (cache_salt, or vLLM's first-block
// extra keys), or else inherits its parent's on this worker, as Dynamo's
// normalizer does. The Normalizer remembers each block's namespace; a hash
// stored under two namespaces becomes ambiguous, and its unsalted children
// cannot be placed in either.

// dynamoSaltPrefix marks cache salts set by Dynamo's frontend; the namespace
// is the salt without it.
const dynamoSaltPrefix = "dynamo-cache-salt:"

// nsState is a remembered block's cache namespace (by XXH64 of its name) or
// ambiguous.
type nsState struct {
	hash      uint64
	ambiguous bool
}

// blockNS is the namespace a store's blocks are hashed under, if any.
type blockNS struct {
	hash uint64 // XXH64 of the namespace
	ok   bool
}

// namespace returns a store's namespace: its own, or its parent's on this
// worker. It returns false when the parent's namespace is ambiguous.
func (n *Normalizer) namespace(ev *rawEvent) (blockNS, bool) {
	if ns := eventNamespace(ev); len(ns) > 0 {
		return blockNS{hash: xxhash.Sum64(ns), ok: true}, true
	}
	if !ev.HasParent {
		return blockNS{}, true
	}
	st, ok := n.ns[ev.Parent]
	switch {
	case !ok:
		return blockNS{}, true
	case st.ambiguous:
		return blockNS{}, false
	}
	return blockNS{hash: st.hash, ok: true}, true
}

// eventNamespace returns the event's own cache namespace: the cache_salt
// field, or else the salt in the first block's extra keys.
func eventNamespace(ev *rawEvent) []byte {
	ns := ev.CacheSalt
	if !ev.HasCacheSalt || len(ns) == 0 {
		ns = extraKeysSalt(ev)
	}
	return bytes.TrimPrefix(ns, []byte(dynamoSaltPrefix))
}

// remember records the namespace of stored blocks: a new block takes ns (up
// to maxNS remembered blocks); a known one stored again under another
// namespace, or none, becomes ambiguous.
func (n *Normalizer) remember(hashes []uint64, ns blockNS, b *Batch) {
	for _, h := range hashes {
		st, known := n.ns[h]
		switch {
		case ns.ok && !known:
			if len(n.ns) >= n.maxNS {
				b.namespaceOverflow++
				n.warn(warnNamespaceOverflow, "cache namespace memory full; unsalted children of this block will not inherit its namespace",
					"max_namespaced_blocks", n.maxNS)
				continue
			}
			n.ns[h] = nsState{hash: ns.hash}
		case known && !st.ambiguous && (!ns.ok || st.hash != ns.hash):
			n.ns[h] = nsState{ambiguous: true}
		}
	}
}

// forget drops the namespaces of removed blocks. An ambiguous hash stays
// ambiguous: another copy of it may remain.
func (n *Normalizer) forget(hashes []uint64) {
	for _, h := range hashes {
		if st, ok := n.ns[h]; ok && !st.ambiguous {
			delete(n.ns, h)
		}
	}
}

// namespacedBlocks returns how many block namespaces are remembered.
func (n *Normalizer) namespacedBlocks() int { return len(n.ns) }
