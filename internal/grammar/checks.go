package grammar

import (
	"context"
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
//
// Checks of one key that miss while its compile runs wait for that compile
// instead of starting their own (a tenant sending the same large schema in
// many concurrent requests compiles it once). The key holds the tenant, so
// only a tenant's own requests ever wait on each other (I11).
type Checks struct {
	mu sync.Mutex
	l  tenantLRU[schemaAnswer]
	// f holds the compiles running, the waiters and the counts: hits
	// are checks answered without a compile of their own (remembered,
	// or waited for another check's), misses the compiles.
	f flights[schemaAnswer]
	// compile is CompileSchema (tests count and hold compiles).
	compile func([]byte) (*Grammar, error)
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
	return &Checks{l: newTenantLRU[schemaAnswer](math.MaxInt, math.MaxInt, tenantBytes, maxBytes, nil), compile: CompileSchema}
}

// Check returns what CompileSchema answers for tenant's schema: its error
// (nil: the schema compiles) and, when it compiles, whether it follows a
// $ref (Grammar.UsesRef). hit reports that the answer came without a
// compile of this call's own: remembered, or from the compile of a
// concurrent check of the same key, which Check waits for until ctx ends
// (then it returns ctx's error).
func (c *Checks) Check(ctx context.Context, tenant string, schema []byte) (usesRef, hit bool, err error) {
	k := cacheKey(tenant, false, schema)
	r, hit, err := c.f.do(ctx, &c.mu, k,
		func() (schemaAnswer, bool) { return c.l.get(k) },
		func() (r schemaAnswer) {
			g, err := c.compile(schema)
			if err != nil {
				r.err = err
			} else {
				r.usesRef = g.UsesRef()
			}
			return r
		},
		func(r schemaAnswer) {
			size := int64(checkEntryBytes)
			if r.err != nil {
				size += int64(len(r.err.Error()))
			}
			c.l.put(k, tenant, size, r)
		})
	if err != nil {
		return false, false, err
	}
	return r.usesRef, hit, r.err
}

// Stats returns the checks answered from memory (hits) and by compiling
// (misses).
func (c *Checks) Stats() (hits, misses int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f.hits, c.f.misses
}

// Lookups counts the checks by how each was answered.
func (c *Checks) Lookups() Lookups {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f.lookups()
}
