package grammar

import (
	"context"
	"crypto/sha256"
	"sync"
)

// Cache keeps compiled grammars for reuse, keyed by tenant and schema.
// The tenant is part of the key (as it is of the prefix cache's, I11): a
// cache shared across tenants would be a timing side channel, a fast
// first request telling tenant B that someone already sent that schema.
// Each tenant holds at most DefaultPerTenant entries, so one tenant
// sending many schemas evicts its own entries, not other tenants'.
//
// The token masks the entries cache (per position, a bit per vocabulary
// token: 19 KB each at 151k tokens) are bounded together by a byte budget:
// without it, 256 entries of up to MaxMaskBytes each could hold 16 GiB.
// A mask that does not fit first takes room from the tenant holding the
// most mask bytes, dropping the masks of its least recently used grammar;
// when that tenant is the one asking and it has no other grammar's masks
// to give, the mask is used and not kept. So a tenant filling the budget
// with many schemas drops its own masks, not another tenant's within a
// fair share, and a dropped mask only costs a walk again.
//
// Lookups of one key that miss while its compile runs wait for that
// compile instead of starting their own (flights, as Checks does): a
// tenant's identical first requests, arriving together, compile their
// schema once. The key holds the tenant, so another tenant's identical
// schema compiles on its own (I11).
type Cache struct {
	v        *Vocab
	maxBytes int64

	mu sync.Mutex
	// grams holds the compiled grammars, bounded by count and by their
	// memory too: a 35-byte schema ({"type": "string", "maxLength":
	// 24000}) compiles to 96,000 elements, about 5 MB, so 32 entries a
	// tenant were 160 MB and 256 a worker 1.3 GB, beside the mask budget.
	// A tenant past DefaultPerTenant grammars or DefaultTenantGrammarBytes
	// drops its own least recently used ones; past DefaultCacheEntries or
	// DefaultGrammarBytes in all, the least recently used of the tenant
	// holding the most goes (tenantLRU), so heavy tenants at their own
	// bounds cannot evict a lighter tenant's grammar.
	grams tenantLRU[*Compiled]
	// f holds the compiles running and the lookups' counts (tests): hits
	// are lookups answered without a compile of their own (kept, or
	// waited for another lookup's), misses the compiles.
	f flights[compileAnswer]
	// compile is CompileSchema (tests count and hold compiles).
	compile func([]byte) (*Grammar, error)
	// maskBytes is what the entries' masks hold (reserved by storePos);
	// dropped counts grammars whose masks were dropped for room.
	maskBytes, dropped int64
}

// Default cache bounds.
const (
	DefaultCacheEntries = 256
	DefaultPerTenant    = 32
	// DefaultMaskBytes is the mask budget of a cache: about 27,000
	// positions at a 151k vocabulary, 8 grammars at MaxMaskBytes.
	DefaultMaskBytes = 512 << 20
	// DefaultTenantGrammarBytes and DefaultGrammarBytes bound the memory
	// of the compiled grammars a cache holds for one tenant and for all:
	// about 12 and 50 grammars of the largest size (MaxElements).
	DefaultTenantGrammarBytes = 64 << 20
	DefaultGrammarBytes       = 256 << 20
)

// NewCache returns a cache of grammars bound to v whose masks hold at
// most maskBytes together (<= 0: DefaultMaskBytes).
func NewCache(v *Vocab, maskBytes int64) *Cache {
	if maskBytes <= 0 {
		maskBytes = DefaultMaskBytes
	}
	c := &Cache{v: v, maxBytes: maskBytes, compile: CompileSchema}
	c.grams = newTenantLRU(DefaultPerTenant, DefaultCacheEntries, DefaultTenantGrammarBytes, DefaultGrammarBytes,
		func(comp *Compiled) { c.maskBytes -= comp.dropMasks(true) })
	return c
}

// Vocab is the vocabulary the cache binds grammars to.
func (c *Cache) Vocab() *Vocab { return c.v }

// CompileWith makes c compile schemas with compile in place of
// CompileSchema: the engine's tests hold a compile with it, to end a
// request while another waits for it. Call it before c is used.
func (c *Cache) CompileWith(compile func(schema []byte) (*Grammar, error)) {
	c.mu.Lock()
	c.compile = compile
	c.mu.Unlock()
}

// Waiting is how many Gets wait now for another Get's compile.
func (c *Cache) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f.waiting
}

func cacheKey[S string | []byte](tenant string, jsonObject bool, schema S) [32]byte {
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

// compileAnswer is what one compile of a lookup's key answered: the
// grammar bound to the cache's vocabulary and its size, or the error.
type compileAnswer struct {
	comp  *Compiled
	bytes int64
	err   error
}

// Get returns tenant's compiled grammar for a JSON Schema (jsonObject
// false) or for any JSON object (jsonObject true, schema ignored),
// compiling it on a miss. hit reports that it came without a compile of
// this call's own: cached, or compiled by a concurrent Get of the same
// tenant and schema, which Get waits for until ctx ends (then it returns
// ctx's error). Compile errors are not cached (the Gets waiting for that
// compile get its error).
func (c *Cache) Get(ctx context.Context, tenant string, jsonObject bool, schema string) (comp *Compiled, hit bool, err error) {
	if jsonObject {
		schema = ""
	}
	k := cacheKey(tenant, jsonObject, schema)
	a, hit, err := c.f.do(ctx, &c.mu, k,
		func() (compileAnswer, bool) {
			comp, ok := c.grams.get(k)
			return compileAnswer{comp: comp}, ok
		},
		func() (a compileAnswer) {
			var g *Grammar
			if jsonObject {
				g = JSONObject()
			} else if g, a.err = c.compile([]byte(schema)); a.err != nil {
				return a
			}
			a.comp = Bind(g, c.v)
			a.comp.owner, a.comp.tenant = c, tenant
			a.comp.maxM = min(a.comp.maxM, c.maxBytes)
			a.bytes = g.Bytes()
			return a
		},
		func(a compileAnswer) {
			if a.err == nil {
				c.grams.put(k, tenant, a.bytes, a.comp)
			}
		})
	if err != nil {
		return nil, false, err
	}
	if a.err != nil {
		return nil, hit, a.err
	}
	return a.comp, hit, nil
}

// reserve takes size bytes of the mask budget for comp, making room as
// Cache's doc says; false: comp is not to keep the mask.
func (c *Cache) reserve(comp *Compiled, size int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.maskBytes+size > c.maxBytes {
		if !c.makeRoom(comp) {
			return false
		}
	}
	c.maskBytes += size
	return true
}

// release returns bytes reserve took that were not kept.
func (c *Cache) release(size int64) {
	c.mu.Lock()
	c.maskBytes -= size
	c.mu.Unlock()
}

// makeRoom drops the masks of the least recently used grammar of the
// tenant holding the most mask bytes (tenantLRU.heaviest, the rule that
// evicts grammars), not comp's own; false when there is nothing it may
// drop.
func (c *Cache) makeRoom(comp *Compiled) bool {
	held := map[string]int64{}
	c.grams.each(func(e *lruEntry[*Compiled]) { held[e.tenant] += e.v.MaskBytes() })
	heavy := heaviest(held)
	e := c.grams.oldestWhere(heavy, func(e *lruEntry[*Compiled]) bool { return e.v != comp && e.v.MaskBytes() > 0 })
	if e == nil {
		return false
	}
	c.maskBytes -= e.Value.(*lruEntry[*Compiled]).v.dropMasks(false)
	c.dropped++
	return true
}

// Stats returns the lookups answered without a compile of their own
// (hits) and the compiles (misses).
func (c *Cache) Stats() (hits, misses int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f.hits, c.f.misses
}

// Lookups counts the cache's lookups by how each was answered.
func (c *Cache) Lookups() Lookups {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f.lookups()
}

// MaskStats returns the bytes the cached grammars' masks hold and how
// many grammars had their masks dropped to stay within the budget.
func (c *Cache) MaskStats() (bytes, dropped int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maskBytes, c.dropped
}
