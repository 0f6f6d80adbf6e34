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
	mu    sync.Mutex
	l     tenantLRU[schemaAnswer]
	calls map[[32]byte]*checkCall // compiles running, by key
	// waiting is how many checks wait for another's compile now.
	waiting int
	// hits counts the checks answered without a compile of their own
	// (remembered, or waited for another check's); misses the compiles.
	hits, misses int64
	// compile is CompileSchema (tests count and hold compiles).
	compile func([]byte) (*Grammar, error)
}

// checkCall is one compile running for a key. done is closed when it
// ends; ok then says it returned (r is its answer) rather than panicked.
type checkCall struct {
	done chan struct{}
	ok   bool
	r    schemaAnswer
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
	return &Checks{l: newTenantLRU[schemaAnswer](math.MaxInt, math.MaxInt, tenantBytes, maxBytes, nil),
		calls: map[[32]byte]*checkCall{}, compile: CompileSchema}
}

// Check returns what CompileSchema answers for tenant's schema: its error
// (nil: the schema compiles) and, when it compiles, whether it follows a
// $ref (Grammar.UsesRef). hit reports that the answer came without a
// compile of this call's own: remembered, or from the compile of a
// concurrent check of the same key, which Check waits for until ctx ends
// (then it returns ctx's error).
func (c *Checks) Check(ctx context.Context, tenant string, schema []byte) (usesRef, hit bool, err error) {
	k := cacheKey(tenant, false, schema)
	for {
		c.mu.Lock()
		if r, ok := c.l.get(k); ok {
			c.hits++
			c.mu.Unlock()
			return r.usesRef, true, r.err
		}
		call, ok := c.calls[k]
		if !ok {
			break // c.mu still held: this check compiles
		}
		c.waiting++
		c.mu.Unlock()
		var done bool
		select {
		case <-call.done:
			done = true
		case <-ctx.Done():
		}
		c.mu.Lock()
		c.waiting--
		if done && call.ok {
			c.hits++
			c.mu.Unlock()
			return call.r.usesRef, true, call.r.err
		}
		c.mu.Unlock()
		if !done {
			return false, false, ctx.Err()
		}
		// The compile panicked: check again (and compile, as a check
		// with no cache would).
	}
	call := &checkCall{done: make(chan struct{})}
	c.calls[k] = call
	c.misses++
	c.mu.Unlock()
	// The waiters are released however the compile ends (a panic leaves
	// call.ok false).
	defer func() {
		c.mu.Lock()
		delete(c.calls, k)
		if call.ok {
			size := int64(checkEntryBytes)
			if call.r.err != nil {
				size += int64(len(call.r.err.Error()))
			}
			c.l.put(k, tenant, size, call.r)
		}
		c.mu.Unlock()
		close(call.done)
	}()
	g, err := c.compile(schema)
	if err != nil {
		call.r.err = err
	} else {
		call.r.usesRef = g.UsesRef()
	}
	call.ok = true
	return call.r.usesRef, false, call.r.err
}

// Stats returns the checks answered from memory (hits) and by compiling
// (misses).
func (c *Checks) Stats() (hits, misses int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}
