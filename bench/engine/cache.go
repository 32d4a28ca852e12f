package engine

// Cache is a fixed-capacity LRU set of block hashes. It allocates nothing per
// operation once built: entries live in one slice linked by index.
type Cache struct {
	capacity int
	idx      map[uint64]int32
	nodes    []cacheNode // nodes[0] is the list sentinel
	free     []int32
}

type cacheNode struct {
	key        uint64
	prev, next int32
}

// NewCache returns an empty cache that holds at most capacity hashes.
// capacity must be positive.
func NewCache(capacity int) *Cache {
	if capacity <= 0 {
		capacity = 1
	}
	c := &Cache{capacity: capacity}
	c.Reset()
	return c
}

// Reset empties the cache.
func (c *Cache) Reset() {
	c.idx = make(map[uint64]int32, c.capacity)
	c.nodes = make([]cacheNode, 1, c.capacity+1)
	c.nodes[0] = cacheNode{prev: 0, next: 0}
	c.free = c.free[:0]
}

// Len is the number of hashes held.
func (c *Cache) Len() int { return len(c.idx) }

// Capacity is the maximum number of hashes held.
func (c *Cache) Capacity() int { return c.capacity }

// Contains reports whether key is held, without changing its recency.
func (c *Cache) Contains(key uint64) bool {
	_, ok := c.idx[key]
	return ok
}

// Touch makes key the most recently used; it reports whether key was held.
func (c *Cache) Touch(key uint64) bool {
	i, ok := c.idx[key]
	if !ok {
		return false
	}
	c.unlink(i)
	c.pushFront(i)
	return true
}

// Insert adds key as the most recently used. When the cache is full it first
// evicts the least recently used key and returns it with evicted true.
// Inserting a key already held only touches it.
func (c *Cache) Insert(key uint64) (victim uint64, evicted bool) {
	if c.Touch(key) {
		return 0, false
	}
	var i int32
	if len(c.idx) >= c.capacity {
		i = c.nodes[0].prev // tail
		victim, evicted = c.nodes[i].key, true
		c.unlink(i)
		delete(c.idx, victim)
	} else if n := len(c.free); n > 0 {
		i = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		c.nodes = append(c.nodes, cacheNode{})
		i = int32(len(c.nodes) - 1)
	}
	c.nodes[i].key = key
	c.idx[key] = i
	c.pushFront(i)
	return victim, evicted
}

// Remove drops key; it reports whether key was held.
func (c *Cache) Remove(key uint64) bool {
	i, ok := c.idx[key]
	if !ok {
		return false
	}
	c.unlink(i)
	delete(c.idx, key)
	c.free = append(c.free, i)
	return true
}

// Oldest returns the least recently used key.
func (c *Cache) Oldest() (uint64, bool) {
	if len(c.idx) == 0 {
		return 0, false
	}
	return c.nodes[c.nodes[0].prev].key, true
}

func (c *Cache) unlink(i int32) {
	n := &c.nodes[i]
	c.nodes[n.prev].next = n.next
	c.nodes[n.next].prev = n.prev
}

func (c *Cache) pushFront(i int32) {
	head := c.nodes[0].next
	c.nodes[i].prev = 0
	c.nodes[i].next = head
	c.nodes[head].prev = i
	c.nodes[0].next = i
}

// Access serves one prompt given its chained block hashes, the way an engine's
// prefix cache does: hit is how many leading hashes were held; the missing
// ones are inserted (at most Capacity in all, so a prompt longer than the
// cache keeps its head), evicting the least recently used, and their victims
// are appended to removed. Afterwards the prompt's blocks are the most
// recently used, block 0 first, since an engine frees a request's blocks
// tail first.
func (c *Cache) Access(h []uint64, removed []uint64) (hit, stored int, _ []uint64) {
	n := len(h)
	for hit < n && c.Contains(h[hit]) {
		hit++
	}
	k := min(n, c.capacity)
	hit = min(hit, k)
	// Protect the hits first so inserting cannot evict them.
	for i := hit - 1; i >= 0; i-- {
		c.Touch(h[i])
	}
	for i := hit; i < k; i++ {
		if v, ok := c.Insert(h[i]); ok {
			removed = append(removed, v)
		}
	}
	for i := k - 1; i >= 0; i-- {
		c.Touch(h[i])
	}
	return hit, k - hit, removed
}

// check verifies the list and the map agree; tests call it.
func (c *Cache) check() error {
	seen := 0
	for i := c.nodes[0].next; i != 0; i = c.nodes[i].next {
		if c.idx[c.nodes[i].key] != i {
			return errCacheCorrupt
		}
		if c.nodes[c.nodes[i].next].prev != i {
			return errCacheCorrupt
		}
		seen++
		if seen > len(c.idx) {
			return errCacheCorrupt
		}
	}
	if seen != len(c.idx) || seen > c.capacity {
		return errCacheCorrupt
	}
	return nil
}
