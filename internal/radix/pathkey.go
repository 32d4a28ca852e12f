package radix

import "github.com/kvrouter/kvrouter/internal/kv"

// rootKey is the path key of every shard's root.
const rootKey = 0x6b76726f75746572 // "kvrouter"

// pathKey chains a child's block hash onto its parent's path key. For a fixed
// parent key it is a bijection of h, so two children of one node never share a
// key; keys of different paths may collide and are told apart by parent id.
func pathKey(parent, h uint64) uint64 {
	return kv.Mix(parent ^ (h * 0x9e3779b97f4a7c15))
}

// PrefixKeys appends to out one key per block hash: the key of the prefix up
// to and including that block, chained from the root as the index keys its
// nodes. Equal prefixes give equal keys; distinct prefixes collide with
// probability about 2^-64 a pair (the index itself tells collisions apart by
// parent, a caller keying its own table by these keys accepts that chance).
func PrefixKeys(blockHashes []uint64, out []uint64) []uint64 {
	k := uint64(rootKey)
	for _, h := range blockHashes {
		k = pathKey(k, h)
		out = append(out, k)
	}
	return out
}
