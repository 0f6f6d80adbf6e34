package grammar

import (
	"container/list"
	"crypto/sha256"
	"sync"
)

// Cache keeps compiled grammars for reuse, keyed by tenant and schema.
// The tenant is part of the key (as it is of the prefix cache's, I11): a
// cache shared across tenants would be a timing side channel, a fast
// first request telling tenant B that someone already sent that schema.
// Each tenant holds at most PerTenant entries, so one tenant sending many
// schemas evicts its own entries, not other tenants'.
type Cache struct {
	v         *Vocab
	max       int
	perTenant int

	mu      sync.Mutex
	entries map[[32]byte]*list.Element
	lru     *list.List // front: most recent
	count   map[string]int
	// hits and misses count lookups (tests, metrics).
	hits, misses int64
}

type cacheEntry struct {
	key    [32]byte
	tenant string
	c      *Compiled
}

// Default cache bounds.
const (
	DefaultCacheEntries = 256
	DefaultPerTenant    = 32
)

// NewCache returns a cache of grammars bound to v.
func NewCache(v *Vocab) *Cache {
	return &Cache{v: v, max: DefaultCacheEntries, perTenant: DefaultPerTenant,
		entries: map[[32]byte]*list.Element{}, lru: list.New(), count: map[string]int{}}
}

// Vocab is the vocabulary the cache binds grammars to.
func (c *Cache) Vocab() *Vocab { return c.v }

func cacheKey(tenant string, jsonObject bool, schema string) [32]byte {
	h := sha256.New()
	var n [8]byte
	for i, l := 0, uint64(len(tenant)); i < 8; i++ {
		n[i] = byte(l >> (8 * i))
	}
	h.Write(n[:])
	h.Write([]byte(tenant))
	if jsonObject {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{2})
	}
	h.Write([]byte(schema))
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// Get returns tenant's compiled grammar for a JSON Schema (jsonObject
// false) or for any JSON object (jsonObject true, schema ignored),
// compiling it on a miss. hit reports whether it was cached. Compile
// errors are not cached.
func (c *Cache) Get(tenant string, jsonObject bool, schema string) (comp *Compiled, hit bool, err error) {
	if jsonObject {
		schema = ""
	}
	k := cacheKey(tenant, jsonObject, schema)
	c.mu.Lock()
	if e, ok := c.entries[k]; ok {
		c.lru.MoveToFront(e)
		c.hits++
		comp = e.Value.(*cacheEntry).c
		c.mu.Unlock()
		return comp, true, nil
	}
	c.misses++
	c.mu.Unlock()
	var g *Grammar
	if jsonObject {
		g = JSONObject()
	} else if g, err = CompileSchema([]byte(schema)); err != nil {
		return nil, false, err
	}
	comp = Bind(g, c.v)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[k]; ok { // compiled concurrently
		return e.Value.(*cacheEntry).c, false, nil
	}
	if c.count[tenant] >= c.perTenant {
		for e := c.lru.Back(); e != nil; e = e.Prev() {
			if e.Value.(*cacheEntry).tenant == tenant {
				c.remove(e)
				break
			}
		}
	}
	for c.lru.Len() >= c.max {
		c.remove(c.lru.Back())
	}
	c.entries[k] = c.lru.PushFront(&cacheEntry{key: k, tenant: tenant, c: comp})
	c.count[tenant]++
	return comp, false, nil
}

func (c *Cache) remove(e *list.Element) {
	ce := e.Value.(*cacheEntry)
	c.lru.Remove(e)
	delete(c.entries, ce.key)
	if c.count[ce.tenant]--; c.count[ce.tenant] == 0 {
		delete(c.count, ce.tenant)
	}
}

// Stats returns the lookups that hit and missed.
func (c *Cache) Stats() (hits, misses int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}
