package radix

// The node arena: nodes are named by uint32 ids, in chunks of chunkSize.
const (
	chunkBits = 10
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1

	rootID   = 0
	noParent = ^uint32(0) // the root's parent, and a free node's
)

// nodeMeta is a node: 24 bytes, so that Match, which checks a node's key and
// parent and reads its set, finds the next node of a run on the same or the
// next cache line (a run's nodes get consecutive ids, see alloc).
type nodeMeta struct {
	key    uint64 // path key (rootKey for the root)
	parent uint32 // noParent for the root and for free nodes
	set    uint32 // holder set id; emptySet when no worker holds the node
	nchild uint32 // live children
	depth  uint32 // blocks before this one on its path
}

// nodeChunk is chunkSize nodes of the arena: ids id>>chunkBits.
type nodeChunk struct {
	meta [chunkSize]nodeMeta
}

// ovKey keys an unchained node whose path key another node has in kids.
type ovKey struct {
	parent uint32
	key    uint64
}

// meta returns node id.
func (s *shard) meta(id uint32) *nodeMeta { return &s.chunks[id>>chunkBits].meta[id&chunkMask] }

// key returns node id's path key.
func (s *shard) key(id uint32) uint64 {
	if id == rootID {
		return rootKey
	}
	return s.chunks[id>>chunkBits].meta[id&chunkMask].key
}

// lookup finds the child of parent whose path key is k: at parent's next id
// (see chained) or in kids.
func (s *shard) lookup(parent uint32, k uint64) (uint32, bool) {
	if s.chainedChild(parent, k) != nil {
		return parent + 1, true
	}
	return s.lookupKids(parent, k)
}

// chainedChild returns the child of parent whose path key is k if it has
// parent's next id (see chained), or nil.
func (s *shard) chainedChild(parent uint32, k uint64) *nodeMeta {
	if id := parent + 1; id < s.next {
		if m := s.meta(id); m.parent == parent && m.key == k {
			return m
		}
	}
	return nil
}

// unchainedChild returns the child of parent whose path key is k among the
// nodes that are not chained, or nil.
func (s *shard) unchainedChild(parent uint32, k uint64) (uint32, *nodeMeta) {
	id, ok := s.lookupKids(parent, k)
	if !ok {
		return 0, nil
	}
	return id, s.meta(id)
}

// lookupKids finds the child of parent whose path key is k among the nodes
// that are not chained.
func (s *shard) lookupKids(parent uint32, k uint64) (uint32, bool) {
	v, ok := s.kids.get(k)
	if !ok {
		return 0, false
	}
	id := uint32(v)
	if s.meta(id).parent == parent {
		return id, true
	}
	if len(s.over) == 0 {
		return 0, false
	}
	id, ok = s.over[ovKey{parent, k}]
	return id, ok
}

// chained reports whether node id, a child of parent, has its parent's next
// id. Such a node is found there (by parent and key, which is exact) and is
// not keyed in kids: most nodes are chained (see alloc), so kids stays small
// and a store or free of a chained node touches no hash table.
func chained(id, parent uint32) bool { return id == parent+1 }

// child finds or creates the child of parent whose path key is k, at depth
// (a child of the root is the first node of a segment, at any depth).
func (s *shard) child(parent uint32, k uint64, depth uint32) uint32 {
	if len(s.chunks) == 0 {
		c := new(nodeChunk)
		c.meta[rootID] = nodeMeta{key: rootKey, parent: noParent}
		s.chunks = append(s.chunks, c)
	}
	pm := s.meta(parent)
	if pm.nchild > 0 { // (a run's new nodes have none: no lookup)
		if id, ok := s.lookup(parent, k); ok {
			return id
		}
	}
	id := s.alloc(parent)
	*s.meta(id) = nodeMeta{key: k, parent: parent, depth: depth}
	pm.nchild++
	if !chained(id, parent) {
		if p, taken := s.kids.ref(k); taken {
			if s.over == nil {
				s.over = make(map[ovKey]uint32)
			}
			s.over[ovKey{parent, k}] = id
		} else {
			*p = uint64(id)
		}
	}
	s.live++
	// Keep free within 2 ids per free node (plus slack): alloc leaves listed
	// the ids it takes as a parent's next. (release only adds a listing per
	// node it frees, which keeps the bound.)
	if len(s.free) > 2*s.nfree()+1024 {
		s.compactFree()
	}
	return id
}

// alloc returns a free node id for a new child of parent: parent+1 when that
// node is free, so that a run's nodes get consecutive ids (which Match
// follows without probing) whatever order nodes were freed in; else the most
// recently freed node (release frees a chain leaf first, so the nodes after it
// are that chain's, free too); else a new id. A free node is one with no
// parent; free may also list nodes that alloc has since taken by the first
// rule (skipped here, dropped by compactFree).
func (s *shard) alloc(parent uint32) uint32 {
	if id := parent + 1; id < s.next && s.meta(id).parent == noParent {
		return id
	}
	for n := len(s.free); n > 0; n = len(s.free) {
		id := s.free[n-1]
		s.free = s.free[:n-1]
		if s.meta(id).parent == noParent {
			return id
		}
	}
	id := s.next
	s.next++
	if int(id>>chunkBits) == len(s.chunks) {
		s.chunks = append(s.chunks, new(nodeChunk))
	}
	return id
}

// nfree is the number of free nodes.
func (s *shard) nfree() int { return int(s.next) - 1 - s.live }

// compactFree drops from free the nodes that are no longer free and the
// repeats (a node freed, taken as a parent's next and freed again is listed
// twice), keeping the order of the rest.
func (s *shard) compactFree() {
	seen := make([]uint64, (s.next+63)/64)
	out := s.free[:0]
	for _, id := range s.free {
		if s.meta(id).parent == noParent && seen[id/64]&(1<<(id%64)) == 0 {
			seen[id/64] |= 1 << (id % 64)
			out = append(out, id)
		}
	}
	clear(s.free[len(out):])
	s.free = out
}

// release frees id and then every ancestor left with no holder and no child.
func (s *shard) release(id uint32) {
	for id != rootID {
		m := s.meta(id)
		if m.set != emptySet || m.nchild != 0 {
			return
		}
		k, p := s.key(id), m.parent
		if chained(id, p) { // not in kids
		} else if cur, ok := s.kids.get(k); ok && uint32(cur) == id {
			s.kids.del(k)
			for ok2, oid := range s.over {
				if ok2.key == k {
					delete(s.over, ok2)
					s.kids.set(k, uint64(oid))
					break
				}
			}
		} else {
			delete(s.over, ovKey{p, k})
		}
		m.parent = noParent
		s.meta(p).nchild--
		s.free = append(s.free, id)
		s.live--
		id = p
	}
	if s.live == 0 {
		s.reset()
	}
}
