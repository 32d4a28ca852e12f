package tokenizer

import (
	"strings"
	"sync"
	"sync/atomic"
)

// defaultCacheEntries bounds the word cache; each entry is one pre-token and its ids.
const (
	defaultCacheEntries = 1 << 16
	maxCachedWordBytes  = 256
	cacheShards         = 16
)

// wordCache maps pre-tokens to their ids. It is exact: BPE never merges across pre-tokens, so a
// word's ids do not depend on its neighbours. A full shard is emptied rather than evicted entry
// by entry; words recur, so it refills at once.
type wordCache struct {
	shards       [cacheShards]cacheShard
	perShard     int
	hits, misses atomic.Uint64
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]uint32
}

func newWordCache(entries int) *wordCache {
	c := &wordCache{perShard: max(entries/cacheShards, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]uint32)
	}
	return c
}

// shard spreads words by their length and last byte: cheap, and enough to keep the shards'
// locks apart.
func (c *wordCache) shard(w string) *cacheShard {
	return &c.shards[(uint(len(w))*7+uint(w[len(w)-1]))%cacheShards]
}

func (c *wordCache) get(w string) ([]uint32, bool) {
	if len(w) > maxCachedWordBytes {
		return nil, false
	}
	s := c.shard(w)
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return ids, ok
}

func (c *wordCache) put(w string, ids []uint32) {
	if len(w) > maxCachedWordBytes {
		return
	}
	s := c.shard(w)
	cp := append([]uint32(nil), ids...)
	s.mu.Lock()
	if len(s.m) >= c.perShard {
		clear(s.m)
	}
	s.m[strings.Clone(w)] = cp
	s.mu.Unlock()
}

func (c *wordCache) stats() (hits, misses uint64) { return c.hits.Load(), c.misses.Load() }

// Segment cache bounds: a segment is the text between two added tokens (a chat turn between
// <|im_start|> and <|im_end|>); short ones are left to the word cache.
const (
	minSegmentBytes     = 64
	defaultSegmentBytes = 64 << 20
)

// segmentCache maps segments to their ids. It is exact: added tokens are split out before
// normalization and pre-tokenization, so a segment's ids do not depend on what surrounds it, and
// the earlier turns of a conversation are not tokenized again. Each shard holds at most its share
// of the byte budget (text plus ids) and is emptied when full.
type segmentCache struct {
	shards       [cacheShards]segmentShard
	perShard     int
	hits, misses atomic.Uint64
}

type segmentShard struct {
	mu    sync.RWMutex
	m     map[string][]uint32
	bytes int
}

func newSegmentCache(budget int) *segmentCache {
	c := &segmentCache{perShard: budget / cacheShards}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]uint32)
	}
	return c
}

func (c *segmentCache) shard(s string) *segmentShard {
	return &c.shards[(uint(len(s))*31+uint(s[len(s)/2])*7+uint(s[len(s)-1]))%cacheShards]
}

func (c *segmentCache) get(s string) ([]uint32, bool) {
	if len(s) < minSegmentBytes || 4*len(s) > c.perShard {
		return nil, false
	}
	sh := c.shard(s)
	sh.mu.RLock()
	ids, ok := sh.m[s]
	sh.mu.RUnlock()
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return ids, ok
}

func (c *segmentCache) put(s string, ids []uint32) {
	if len(s) < minSegmentBytes || 4*len(s) > c.perShard {
		return
	}
	size := len(s) + 4*len(ids)
	cp := append([]uint32(nil), ids...)
	sh := c.shard(s)
	sh.mu.Lock()
	if sh.bytes+size > c.perShard {
		clear(sh.m)
		sh.bytes = 0
	}
	if _, ok := sh.m[s]; !ok {
		sh.m[strings.Clone(s)] = cp
		sh.bytes += size
	}
	sh.mu.Unlock()
}

func (c *segmentCache) stats() (hits, misses uint64) { return c.hits.Load(), c.misses.Load() }
