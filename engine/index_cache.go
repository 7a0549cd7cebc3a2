package engine

import (
	"container/list"
	"sync"
)

// DefaultIndexCacheBytes is the bound of the index cache Options.EnsureDefaults makes.
const DefaultIndexCacheBytes = 256 << 20

// IndexCache is a byte-bounded LRU of the immutable decoded objects index lookups read (primary-
// key index segments, deletion bitmaps). Tables given one cache (Options.IndexCache) share it and
// its bound, the way a server's tables do: entries are named by store, table and UUID file name,
// so they never go stale, they only age out. An IndexCache is safe for concurrent use.
type IndexCache struct {
	maxBytes int64

	mu    sync.Mutex
	order list.List // front = most recently used
	items map[string]*list.Element
	bytes int64
}

type indexCacheItem struct {
	key  string
	val  any
	size int64
}

// NewIndexCache returns an empty cache holding at most maxBytes (estimated) bytes; an object
// larger than that is not cached.
func NewIndexCache(maxBytes int64) *IndexCache {
	return &IndexCache{maxBytes: maxBytes, items: make(map[string]*list.Element)}
}

// Bytes returns the estimated bytes the cache holds.
func (c *IndexCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

func (c *IndexCache) get(k string) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[k]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*indexCacheItem).val, true
}

func (c *IndexCache) put(k string, v any, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if size > c.maxBytes {
		return
	}
	if e, ok := c.items[k]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.items[k] = c.order.PushFront(&indexCacheItem{key: k, val: v, size: size})
	c.bytes += size
	for c.bytes > c.maxBytes {
		e := c.order.Back()
		it := e.Value.(*indexCacheItem)
		c.order.Remove(e)
		delete(c.items, it.key)
		c.bytes -= it.size
	}
}

// reset empties the cache.
func (c *IndexCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.items = make(map[string]*list.Element)
	c.order.Init()
	c.bytes = 0
}
