package grammar

import (
	"math"
	"sync"
)

// Checks remembers what CompileSchema answered for each tenant's schemas,
// so that a router checking the schema a tenant sends with every request
// compiles it once, not once per request (a 64 KB schema takes 30-60 ms).
// The router needs only the answer, not the grammar (the workers compile
// their own from the request's text, I14): whether the schema compiles,
// the error if not, and whether it follows a $ref. So an entry is a key and
// that answer, some 200 bytes, where a compiled grammar can hold megabytes.
//
// The key is the workers' (cacheKey: the tenant is part of it, I11), so a
// tenant's first check of a schema another tenant sent is a miss like any
// other: no timing tells one tenant what another sent. Entries are bounded
// in bytes per tenant and in all, evicted by the workers' rule (tenantLRU):
// a tenant past its bytes drops its own least recently used checks, past
// the total the tenant holding the most gives up its least recently used.
// Refusals are kept too: they are as deterministic as successes, and a
// tenant resending a refused 64 KB schema would otherwise cost a compile
// each time.
type Checks struct {
	mu           sync.Mutex
	l            tenantLRU[schemaAnswer]
	hits, misses int64
}

type schemaAnswer struct {
	usesRef bool
	err     error
}

// Default bounds of Checks: about 1,300 schemas a tenant and 20,000 in
// all at checkEntryBytes each.
const (
	DefaultCheckTenantBytes = 256 << 10
	DefaultCheckBytes       = 4 << 20
)

// checkEntryBytes is about what an entry holds besides its error's text:
// its key twice (map and entry), the list element, the map's slot.
const checkEntryBytes = 200

// NewChecks returns a cache of schema checks bounded to tenantBytes per
// tenant and maxBytes in all (<= 0: the defaults).
func NewChecks(tenantBytes, maxBytes int64) *Checks {
	if tenantBytes <= 0 {
		tenantBytes = DefaultCheckTenantBytes
	}
	if maxBytes <= 0 {
		maxBytes = DefaultCheckBytes
	}
	return &Checks{l: newTenantLRU[schemaAnswer](math.MaxInt, math.MaxInt, tenantBytes, maxBytes, nil)}
}

// Check returns what CompileSchema answers for tenant's schema: its error
// (nil: the schema compiles) and, when it compiles, whether it follows a
// $ref (Grammar.UsesRef). hit reports that the answer was remembered.
func (c *Checks) Check(tenant string, schema []byte) (usesRef, hit bool, err error) {
	k := cacheKey(tenant, false, schema)
	c.mu.Lock()
	if r, ok := c.l.get(k); ok {
		c.hits++
		c.mu.Unlock()
		return r.usesRef, true, r.err
	}
	c.misses++
	c.mu.Unlock()
	var r schemaAnswer
	g, err := CompileSchema(schema)
	if err != nil {
		r.err = err
	} else {
		r.usesRef = g.UsesRef()
	}
	size := int64(checkEntryBytes)
	if err != nil {
		size += int64(len(err.Error()))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.l.get(k); !ok { // not checked concurrently
		c.l.put(k, tenant, size, r)
	}
	return r.usesRef, false, r.err
}

// Stats returns the checks answered from memory (hits) and by compiling
// (misses).
func (c *Checks) Stats() (hits, misses int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}
