package kv

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
)

// The prefix cache (I11). A full, sealed page of a sequence's prompt can be
// handed to a cache entry, keyed by (tenant, chain key); later sequences of
// the SAME tenant whose prompt starts with the same tokens find it and read
// it instead of recomputing it. Isolation does not rest on the key alone:
//
//   - the index is keyed by (tenant, key): a lookup by another tenant cannot
//     find the entry even if the keys collide or the salt were left out;
//   - a reader holds a share, named (page, generation, reader id), taken by
//     Lookup or Insert; every read through a View checks the page's tenant
//     against the reader's on every call (one atomic load, view.go) and the
//     share under the lock on first touch, so a page table forged to point
//     at another tenant's cached page reads nothing (foreign_owner, I8);
//   - a cached page is full and sealed: every write into it is a
//     sealed_write violation (the page is quarantined: it may have been
//     changed, and its readers fail closed);
//   - an entry nobody reads is idle, on its scope's LRU list (a scope is a
//     tenant, or the operator's public scope); allocation under pressure
//     evicts idle entries, never one with a reader, taking first from the
//     tenant that holds the most cached pages for its weight (quotas below).
//     Eviction bumps the generation (a stale ref fails as stale_generation)
//     and scrubs the page (I7) on its way to the free list;
//   - a cached page is never a transfer target (only sealed, fully written,
//     non-fenced pages are inserted, I6), and a quarantined one leaves only
//     after its last reader and then a lease, like any quarantined page.
//
// Quotas (tenants cannot crowd each other out). Each tenant's cached pages
// are bounded by its share of the pool: pages not held by the public scope,
// times its weight (Config.CacheWeight), over the weights of the tenants
// that hold cached pages now, itself included. A tenant at its share that
// inserts again evicts its own oldest idle entry first, and if it has none
// the page is simply not cached. When a reservation needs pages, the victim
// is the oldest idle entry of the tenant most over its share (cached pages
// per weight; at a tie the reserving tenant's own, then the oldest entry), so a tenant flooding unique
// prompts evicts its own pages before anyone else's; and a tenant that
// would hold more than its share of the pool (pages in use and cached)
// evicts no other tenant's entries within that tenant's cache share
// (evictForLocked). The public scope has
// its own fixed budget (Config.PublicCachePages) and is evicted only when no
// tenant has an idle entry. With one tenant every rule above is plain LRU.
//
// Life of a cached page:
//
//	Sealed (private) --Insert--> cached, 1 reader --Lookup--> n+1 readers
//	     cached, 0 readers = idle (LRU) --evict/InvalidateTenant--> scrub --> Free
//	     violation --> Quarantined, unindexed --last reader--> lease --> Free

// BlockKey names one full page of a prompt: the chain hash of everything
// its KV depends on (ChainKey).
type BlockKey [32]byte

// Salt separates cache keys of different tenants (and, narrowed, of
// different cache scopes within a tenant). It is derived by the server from
// the authenticated tenant (salt.go), never taken from a caller.
type Salt [32]byte

// chainDomain labels the chain hash so it can never equal another hash the
// system computes.
const chainDomain = "sluice kv prefix chain v1\x00"

// ChainKey is the key of the page after parent (the zero key for the first
// page) holding tokens, for the model named by fingerprint and the cache
// scope named by salt: SHA-256 over a domain label, parent, the length-
// prefixed fingerprint, the salt and the token ids. A page's KV depends on
// every earlier token (parent), its own tokens, its position (the chain's
// depth) and the weights (fingerprint); two tenants' salts differ, so
// their keys differ even for the same tokens.
func ChainKey(parent BlockKey, fingerprint []byte, salt Salt, tokens []int32) BlockKey {
	h := sha256.New()
	var b [8]byte
	h.Write([]byte(chainDomain))
	h.Write(parent[:])
	binary.LittleEndian.PutUint64(b[:], uint64(len(fingerprint)))
	h.Write(b[:])
	h.Write(fingerprint)
	h.Write(salt[:])
	binary.LittleEndian.PutUint64(b[:], uint64(len(tokens)))
	h.Write(b[:])
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:4], uint32(t))
		h.Write(b[:4])
	}
	var k BlockKey
	h.Sum(k[:0])
	return k
}

// PrefixKeys is the chain of keys of the full pages of tokens (the partial
// last page has none: it is always private).
func PrefixKeys(fingerprint []byte, salt Salt, pageSize int, tokens []int32) []BlockKey {
	if pageSize <= 0 {
		return nil
	}
	n := len(tokens) / pageSize
	keys := make([]BlockKey, n)
	var parent BlockKey
	for i := range n {
		parent = ChainKey(parent, fingerprint, salt, tokens[i*pageSize:(i+1)*pageSize])
		keys[i] = parent
	}
	return keys
}

// cacheState is the pool's cache bookkeeping, guarded by Pool.mu.
type cacheState struct {
	meta    []cmeta
	index   map[entryKey]uint32
	shares  map[shareKey]struct{}
	tenants map[string]uint32 // interned tenant ids, from 1 (the view's per-read check)

	// scopes are the tenants that hold cached pages, public the
	// operator's public scope: each with its idle entries' LRU list.
	scopes       map[string]*scopeCache
	public       scopeCache
	idleSeq      uint64 // stamps entries as they become idle (age across scopes)
	idle         int
	cached       int
	hits, misses uint64 // pages
	inserts      uint64
	evictions    uint64
}

// cmeta is the cache side of one page.
type cmeta struct {
	idleAt  uint64   // cacheState.idleSeq when it last became idle
	cached  bool     // owned by a cache entry (not by a sequence)
	public  bool     // in the operator's public scope: every tenant may read it
	indexed bool     // findable by Lookup; false once invalidated or quarantined
	key     BlockKey // the entry's key while cached
	readers int32    // shares held
	onLRU   bool
	// LRU links within its scope's list (page indices, -1 = none).
	prev, next int32
}

// scopeCache is one scope's cached entries: how many (read or idle) and
// the idle ones, oldest at head.
type scopeCache struct {
	cached     int
	idle       int
	head, tail int32
	// budget is what evictForLocked's reservation may still evict of
	// the scope's idle entries (evictBudgetLocked sets it).
	budget int
}

type entryKey struct {
	tenant string
	key    BlockKey
	// public: the entry is in the operator's public scope (tenant empty).
	// No tenant's entry has it set, so no private entry is ever found by
	// a public lookup nor the reverse.
	public bool
}

// entryKeyFor is the index key of (tenant, key): the tenant is part of it,
// so another tenant's lookup cannot find the entry whatever its key.
func (p *Pool) entryKeyFor(tenant string, key BlockKey) entryKey {
	if p.cfg.Unsafe.CacheIgnoresTenant {
		tenant = "" // TEST HOOK: the tenant-blind cache
	}
	return entryKey{tenant: tenant, key: key}
}

// publicEntryKey is the index key of a public entry.
func publicEntryKey(key BlockKey) entryKey { return entryKey{key: key, public: true} }

// indexKeyLocked is the index key of cached page pg.
func (p *Pool) indexKeyLocked(pg uint32) entryKey {
	cm := &p.cache.meta[pg]
	if cm.public {
		return publicEntryKey(cm.key)
	}
	return p.entryKeyFor(p.pages[pg].owner.Tenant, cm.key)
}

// PublicTenant is the interned tenant id of public cache pages: no tenant
// is ever interned to it (ids count up from 1), and a view accepts it from
// any reader (view.go).
const PublicTenant = ^uint32(0)

// shareKey is one reader's hold on one cached page.
type shareKey struct {
	page uint32
	gen  uint64
	id   ID
}

func (c *cacheState) init(pages int) {
	c.meta = make([]cmeta, pages)
	for i := range c.meta {
		c.meta[i].prev, c.meta[i].next = -1, -1
	}
	c.index = make(map[entryKey]uint32)
	c.shares = make(map[shareKey]struct{})
	c.tenants = make(map[string]uint32)
	c.scopes = make(map[string]*scopeCache)
	c.public = scopeCache{head: -1, tail: -1}
}

// scopeLocked is the scope of a private tenant's entries, made on first
// use; public selects the public scope.
func (c *cacheState) scopeLocked(tenant string, public bool) *scopeCache {
	if public {
		return &c.public
	}
	s := c.scopes[tenant]
	if s == nil {
		s = &scopeCache{head: -1, tail: -1}
		c.scopes[tenant] = s
	}
	return s
}

// pageScopeLocked is the scope of cached page pg.
func (p *Pool) pageScopeLocked(pg uint32) *scopeCache {
	return p.cache.scopeLocked(p.pages[pg].owner.Tenant, p.cache.meta[pg].public)
}

// cacheWeight is tenant's weight in the cache's shares (1 by default).
func (p *Pool) cacheWeight(tenant string) int64 {
	if p.cfg.CacheWeight != nil {
		if w := p.cfg.CacheWeight(tenant); w > 0 {
			return int64(w)
		}
	}
	return 1
}

// publicBudget is the most pages the public scope may cache.
func (p *Pool) publicBudget() int {
	if b := p.cfg.PublicCachePages; b > 0 {
		return b
	}
	return max(1, len(p.pages)/4)
}

// shareLocked is the most pages tenant may cache now: its weight's part
// of the pages the public scope does not hold, among the tenants that
// hold cached pages (itself included). At least one.
func (p *Pool) shareLocked(tenant string) int {
	c := &p.cache
	w := p.cacheWeight(tenant)
	sum := w
	for t, s := range c.scopes {
		if t != tenant && s.cached > 0 {
			sum += p.cacheWeight(t)
		}
	}
	room := int64(len(p.pages) - c.public.cached)
	return int(max(1, room*w/sum))
}

// roomForInsertLocked makes room in a scope at its quota for one more
// entry by evicting the scope's own oldest idle entry; false if the scope
// is at its quota with nothing idle (the page is then not cached).
func (p *Pool) roomForInsertLocked(tenant string, public bool) bool {
	s := p.cache.scopeLocked(tenant, public)
	limit := p.publicBudget()
	if !public {
		limit = p.shareLocked(tenant)
	}
	if s.cached < limit {
		return true
	}
	if s.head == -1 {
		return false
	}
	p.evictLocked(uint32(s.head))
	return true
}

// victimLocked is the idle entry to evict next: the oldest of the tenant
// with the most cached pages for its weight (ties: the oldest entry); the
// public scope's oldest only when no tenant has one; -1 when none is idle.
func (p *Pool) victimLocked() int32 { return p.victimForLocked(nil, "") }

// victimForLocked is victimLocked among the tenants' scopes ok accepts
// (nil: all), where a tie goes to the scope of tenant own (the tenant
// reserving; "" none) before the oldest entry: a tenant flooding unique
// prompts evicts its own entries before anyone else's caching as much for
// its weight (TestShareEngineAndPoolAgree's (c): by age alone, a
// co-tenant's older entry went first at every tie).
func (p *Pool) victimForLocked(ok func(tenant string, s *scopeCache) bool, own string) int32 {
	c := &p.cache
	var best *scopeCache
	var bestT string
	var bestW int64
	for t, s := range c.scopes {
		if s.idle == 0 || (ok != nil && !ok(t, s)) {
			continue
		}
		w := p.cacheWeight(t)
		if best == nil {
			best, bestT, bestW = s, t, w
			continue
		}
		// s.cached/w against best.cached/bestW, without division.
		a, b := int64(s.cached)*bestW, int64(best.cached)*w
		if a > b || (a == b && (t == own || bestT != own && c.meta[s.head].idleAt < c.meta[best.head].idleAt)) {
			best, bestT, bestW = s, t, w
		}
	}
	if best != nil {
		return best.head
	}
	return c.public.head
}

// internLocked is the tenant's small id, the same for the pool's life.
func (p *Pool) internLocked(tenant string) uint32 {
	id, ok := p.cache.tenants[tenant]
	if !ok {
		id = uint32(len(p.cache.tenants) + 1)
		p.cache.tenants[tenant] = id
		p.holds = append(p.holds, tenantHold{name: tenant, at: -1})
	}
	return id
}

// Lookup finds the longest run of keys, from the first, that o's tenant has
// cached, takes a reader share of each page for o and returns their refs
// (the first entries of o's page table). A page is hit only if it still
// matches its seal digest (one hash per page per hit, unless --kv-verify
// off): a cached page is read by many sequences over a long time, so it is
// checked when it is handed out. A page o already reads ends the run. On
// error nothing is held.
func (p *Pool) Lookup(o Owner, keys []BlockKey) ([]PageRef, error) {
	return p.LookupPublic(o, keys, 0)
}

// LookupPublic is Lookup where the first public keys name pages of the
// operator's public scope (InsertPublic): those are found whoever o's
// tenant is; the rest only in o's tenant, as always.
func (p *Pool) LookupPublic(o Owner, keys []BlockKey, public int) ([]PageRef, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	c := &p.cache
	var out []PageRef
	for i, k := range keys {
		ek := p.entryKeyFor(o.Tenant, k)
		if i < public {
			ek = publicEntryKey(k)
		}
		pg, ok := c.index[ek]
		if !ok {
			break
		}
		m := &p.pages[pg]
		ref := PageRef{Page: pg, Gen: tagGen(m.tag.Load())}
		sk := shareKey{pg, ref.Gen, o.ID}
		if _, dup := c.shares[sk]; dup {
			break
		}
		if p.cfg.Verify != VerifyOff && !p.sealIntactLocked(pg) {
			v := p.violateLocked(KindDigestMismatch, pg, true, "cached page %d no longer matches its seal digest", pg)
			p.dropSharesLocked(o, out)
			c.misses += uint64(len(keys)) // all of them are computed now
			return nil, v
		}
		p.addShareLocked(sk)
		out = append(out, ref)
	}
	c.hits += uint64(len(out))
	c.misses += uint64(len(keys) - len(out))
	return out, nil
}

// Insert hands o's page ref, full and sealed, to the cache entry (o's
// tenant, key). o keeps reading it through the same ref (it now holds a
// share); the page is never writable again. It reports false, and changes
// nothing, when the tenant already caches key (o's page stays private) or
// the page is already cached.
func (p *Pool) Insert(o Owner, ref PageRef, key BlockKey) (bool, error) {
	return p.insert(o, ref, key, false)
}

// InsertPublic is Insert into the operator's public scope: every tenant's
// LookupPublic finds the page. Only pages wholly inside the operator's
// declared public prefix may be inserted so (the engine's rule, prefix.go):
// their KV is a function of that prefix and the model alone.
func (p *Pool) InsertPublic(o Owner, ref PageRef, key BlockKey) (bool, error) {
	return p.insert(o, ref, key, true)
}

func (p *Pool) insert(o Owner, ref PageRef, key BlockKey, public bool) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false, errClosed
	}
	if v := p.checkLocked(o, ref, opSeal); v != nil {
		return false, v
	}
	c := &p.cache
	if c.meta[ref.Page].cached {
		return false, nil
	}
	m := &p.pages[ref.Page]
	ps := p.geo.PageSize
	if tagState(m.tag.Load()) != Sealed || int(m.sealed.Load()) != ps || m.qTransfer {
		return false, p.violateLocked(KindBadRange, ref.Page, false,
			"page %d is not full and sealed (%d of %d slots sealed): only full sealed pages are cached", ref.Page, m.sealed.Load(), ps)
	}
	ek := p.entryKeyFor(o.Tenant, key)
	if public {
		ek = publicEntryKey(key)
	}
	if _, ok := c.index[ek]; ok {
		return false, nil
	}
	if !p.roomForInsertLocked(o.Tenant, public) {
		return false, nil
	}
	p.holdLocked(ref.Page, -1) // in use until here; cached (or public) from here
	defer p.holdLocked(ref.Page, +1)
	cm := &c.meta[ref.Page]
	cm.cached, cm.indexed, cm.key, cm.public = true, true, key, public
	c.index[ek] = ref.Page
	c.cached++
	c.scopeLocked(o.Tenant, public).cached++
	c.inserts++
	// The entry owns the page now; the ID is the key's, which no sequence
	// holds, so no sequence-owner check can pass on it.
	var eid ID
	copy(eid[:], key[:])
	m.owner = Owner{Tenant: o.Tenant, ID: eid}
	if public {
		m.owner.Tenant = ""
		m.holder = 0
		m.tenant.Store(PublicTenant)
	}
	p.addShareLocked(shareKey{ref.Page, ref.Gen, o.ID})
	return true, nil
}

// EvictIdle evicts up to n idle cache entries in eviction order (the tenant
// most over its share first, see Quotas; all of them when n < 0), and
// returns how many it evicted.
func (p *Pool) EvictIdle(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	done := 0
	for pg := p.victimLocked(); pg != -1 && (n < 0 || done < n); pg = p.victimLocked() {
		p.evictLocked(uint32(pg))
		done++
	}
	return done
}

// InvalidateTenant removes every cache entry of tenant from the index: idle
// ones are evicted now, ones still read leave after their last reader. It
// returns how many entries it removed.
func (p *Pool) InvalidateTenant(tenant string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	n := 0
	for ek, pg := range p.cache.index {
		if ek.tenant != tenant || ek.public {
			continue
		}
		n++
		if p.cache.meta[pg].readers == 0 {
			p.evictLocked(pg)
			continue
		}
		delete(p.cache.index, ek)
		p.cache.meta[pg].indexed = false
	}
	return n
}

// evictForLocked makes room for tenant's reservation of n pages by
// evicting idle entries in eviction order (victimLocked), but only when
// that is enough: a reservation that cannot fit anyway takes nothing, not
// even the cache.
//
// A tenant that would hold more than its share of the pool's pages in use
// (holdShareLocked) evicts only its own entries, the public scope's and
// those of tenants over their cache share: another tenant's cached pages
// within its share are that tenant's hold on the pool, which a flood of
// unique prompts must not take (issue 28's crowding-out; the KV quota in
// the engine caps the flooder's running sequences the same way). Within
// its share a tenant evicts anyone's, in eviction order.
func (p *Pool) evictForLocked(tenant string, n int) {
	if n <= p.nfree || n > p.nfree+p.cache.idle {
		return
	}
	all, room := p.evictBudgetLocked(tenant, n)
	if all {
		for n > p.nfree {
			p.evictLocked(uint32(p.victimForLocked(nil, tenant)))
		}
		return
	}
	if n > p.nfree+room {
		return
	}
	ok := func(_ string, s *scopeCache) bool { return s.budget > 0 }
	for n > p.nfree {
		pg := uint32(p.victimForLocked(ok, tenant))
		if !p.cache.meta[pg].public {
			p.pageScopeLocked(pg).budget--
		}
		p.evictLocked(pg)
	}
}

// evictBudgetLocked is what a reservation of n pages by tenant may evict:
// any idle entry (all) when it stays within its share of the pool
// (holdShareLocked), else what each tenant's scope may lose, fixed before
// the first eviction and left in its budget: its own idle entries,
// another tenant's excess over its cache share. room is what it may
// evict in all, the public scope's idle entries included. O(tenants), no
// allocation: AvailableFor calls it on every colocated admission check.
func (p *Pool) evictBudgetLocked(tenant string, n int) (all bool, room int) {
	c := &p.cache
	if p.holdShareLocked(tenant, n) {
		return true, c.idle
	}
	// shareLocked for every scope at once: the weights of the scopes
	// (each holds cached pages, audit) summed once.
	var total int64
	for t := range c.scopes {
		total += p.cacheWeight(t)
	}
	pages := int64(len(p.pages) - c.public.cached)
	room = c.public.idle
	for t, s := range c.scopes {
		b := s.idle
		if t != tenant {
			share := int(max(1, pages*p.cacheWeight(t)/total))
			b = min(b, max(0, s.cached-share))
		}
		s.budget = b
		room += b
	}
	return false, room
}

// AvailableFor is the pages a reservation of n pages by tenant could have
// now: the free pages and the idle cache entries Reserve would let it
// evict (evictBudgetLocked). AvailablePages counts every idle entry, also
// other tenants' prefixes a tenant over its share may not take: the
// colocated engine's free-page watermark over it let a flood of long
// prompts take the last free pages, and a co-tenant's next reservation
// then had only its own prefixes to evict (the crowding bench: b's hit
// rate 0.90 flooded vs 0.94 alone). O(tenants), no allocation.
func (p *Pool) AvailableFor(tenant string, n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	_, room := p.evictBudgetLocked(tenant, n)
	return p.nfree + room
}

// holdShareLocked reports whether tenant, taking n more pages, stays within
// its share of the pool: pages times its weight over the weights of the
// tenants holding pages (in use or cached), itself included. What tenant
// holds counts its cached pages too, read or idle: a running sequence's
// prompt pages are cache entries (read by it) from the prompt's end, so
// counting pages in use alone left a flood of long prompts "within its
// share" while its cached prompts filled the pool, and its reservations
// then evicted another tenant's prefixes within that tenant's share.
// The counts are hold.go's, kept as pages change.
func (p *Pool) holdShareLocked(tenant string, n int) bool {
	held, share := p.shareOfLocked(tenant)
	return held+n <= share
}

// shareOfLocked is what tenant holds of the pool (pages in use and its
// cached ones) and its share: the pool's pages times its weight over the
// weights of the contenders, itself included. The contenders are the
// tenants holding pages and those the engine names as waiting for some
// (SetWaiting): the same set, and so the same share, as the engine's KV
// quota (sched.Pages.Share), which counts a tenant holding only cached
// pages as a contender too. Left out, a waiting tenant that holds nothing
// gave every other tenant a larger share here than in the engine, and a
// tenant the engine had over its share could still evict a third
// tenant's prefixes within that tenant's cache share.
func (p *Pool) shareOfLocked(tenant string) (held, share int) {
	w := p.cacheWeight(tenant)
	sum := w
	for _, id := range p.holding {
		h := &p.holds[id]
		if h.name == tenant {
			held = h.held
			continue
		}
		sum += p.cacheWeight(h.name)
	}
	for src, ts := range p.waiting {
		for i, t := range ts {
			if t == tenant || p.heldLocked(t) > 0 || slices.Contains(ts[:i], t) || waitsIn(p.waiting[:src], t) {
				continue
			}
			sum += p.cacheWeight(t)
		}
	}
	return held, int(int64(len(p.pages)) * w / sum)
}

// ShareOf is what tenant holds of the pool (pages in use and its cached
// ones, not the public scope's) and its share of the pool's pages, as the
// pool's share check counts them (holdShareLocked). O(tenants).
func (p *Pool) ShareOf(tenant string) (held, share int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.shareOfLocked(tenant)
}

// heldLocked is the pages tenant holds (hold.go's count).
func (p *Pool) heldLocked(tenant string) int {
	if id, ok := p.cache.tenants[tenant]; ok {
		return p.holds[id].held
	}
	return 0
}

func waitsIn(lists [][]string, t string) bool {
	for _, l := range lists {
		if slices.Contains(l, t) {
			return true
		}
	}
	return false
}

// Who names tenants waiting for a pool's pages (SetWaiting): each source
// keeps its own list, the pool counts their union.
type Who int

const (
	// WaitBatch: the batch's preempted sequences and refused admissions.
	WaitBatch Who = iota
	// WaitReserve: a decode worker's reservations refused for room.
	WaitReserve
	waitSources
)

// SetWaiting names the tenants waiting for pages of the pool now, as seen
// by src (requests refused for room, preempted sequences): contenders in
// the pool share like the tenants holding pages, as in the engine's KV
// quota. The engine calls it once per batch cycle (and a decode worker as
// its refusals change); the list is copied.
func (p *Pool) SetWaiting(src Who, tenants []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiting[src] = append(p.waiting[src][:0], tenants...)
}

// TenantPages is one tenant's count of some kind of pages.
type TenantPages struct {
	Tenant string
	Pages  int
}

// AppendIdle appends, for each tenant with idle private cache entries,
// how many it has, to dst. They are part of the tenant's hold on the pool
// (holdShareLocked) but of no running sequence: the engine's KV quota
// counts such a tenant as a contender for the share (sched.Holder.Cached)
// so that its share and the pool's are one number. O(tenants caching).
func (p *Pool) AppendIdle(dst []TenantPages) []TenantPages {
	p.mu.Lock()
	defer p.mu.Unlock()
	for t, s := range p.cache.scopes {
		if s.idle > 0 {
			dst = append(dst, TenantPages{t, s.idle})
		}
	}
	return dst
}

// evictLocked ends an entry nobody reads: out of the index and the LRU, a
// new generation (any ref to the old one is stale), scrubbed, freed.
func (p *Pool) evictLocked(pg uint32) {
	c := &p.cache
	cm := &c.meta[pg]
	if !cm.cached || cm.readers != 0 {
		panic(fmt.Sprintf("kv: evicting page %d that is not an idle cache entry", pg))
	}
	p.uncacheLocked(pg)
	c.evictions++
	m := &p.pages[pg]
	m.live = false
	p.gen++
	if p.gen > maxGen {
		panic("kv: generation counter exhausted")
	}
	m.tag.Store(mkTag(p.gen, tagState(m.tag.Load())))
	p.freeLocked(pg)
}

// uncacheLocked removes a page's entry from the index and the LRU and
// makes it an ordinary page again (readers must be gone).
func (p *Pool) uncacheLocked(pg uint32) {
	c := &p.cache
	cm := &c.meta[pg]
	p.holdLocked(pg, -1)
	defer p.holdLocked(pg, +1)
	if cm.indexed {
		delete(c.index, p.indexKeyLocked(pg))
	}
	if cm.onLRU {
		p.lruRemoveLocked(pg)
	}
	c.cached--
	s := p.pageScopeLocked(pg)
	if s.cached--; s.cached == 0 && !cm.public {
		delete(c.scopes, p.pages[pg].owner.Tenant) // no longer holds a share
	}
	*cm = cmeta{prev: -1, next: -1}
}

// quarantineCachedLocked is quarantineLocked's cache side: a suspect page
// is findable no more; with no reader left it is an ordinary page waiting
// out its lease, otherwise it leaves after its last reader.
func (p *Pool) quarantineCachedLocked(pg uint32) {
	cm := &p.cache.meta[pg]
	if !cm.cached {
		return
	}
	if cm.indexed {
		delete(p.cache.index, p.indexKeyLocked(pg))
		cm.indexed = false
	}
	if cm.readers == 0 {
		p.uncacheLocked(pg)
		p.pages[pg].live = false
	}
}

func (p *Pool) addShareLocked(sk shareKey) {
	c := &p.cache
	c.shares[sk] = struct{}{}
	cm := &c.meta[sk.page]
	if cm.readers == 0 && cm.onLRU {
		p.lruRemoveLocked(sk.page)
	}
	cm.readers++
}

// dropSharesLocked gives up o's shares of refs, last first, so that a
// chain's deeper pages become idle before (and are evicted before) the
// pages they extend.
func (p *Pool) dropSharesLocked(o Owner, refs []PageRef) {
	for i := len(refs) - 1; i >= 0; i-- {
		p.dropShareLocked(o, refs[i])
	}
}

// dropShareLocked ends o's share of a cached page, checked by the caller.
func (p *Pool) dropShareLocked(o Owner, ref PageRef) {
	c := &p.cache
	sk := shareKey{ref.Page, ref.Gen, o.ID}
	if _, ok := c.shares[sk]; !ok {
		panic(fmt.Sprintf("kv: dropping a share of page %d that is not held", ref.Page))
	}
	delete(c.shares, sk)
	cm := &c.meta[ref.Page]
	if cm.readers--; cm.readers > 0 {
		return
	}
	m := &p.pages[ref.Page]
	switch {
	case tagState(m.tag.Load()) == Quarantined:
		// Suspect: nobody reads it now; it waits out a lease (I6), since
		// whoever touched it may still be writing.
		p.uncacheLocked(ref.Page)
		m.live = false
	case cm.indexed:
		p.lruPushLocked(ref.Page)
	default:
		p.evictLocked(ref.Page) // invalidated while read
	}
}

// checkCachedLocked is checkLocked for a cached page at ref's generation:
// the reader's tenant must be the entry's and the reader must hold a
// share; nothing may write it.
func (p *Pool) checkCachedLocked(o Owner, ref PageRef, op op) *Violation {
	m := &p.pages[ref.Page]
	if m.owner.Tenant != o.Tenant && !p.cache.meta[ref.Page].public && !p.cfg.Unsafe.CacheIgnoresTenant && !p.cfg.Unsafe.NoCacheTenantCheck {
		return p.violateLocked(KindForeignOwner, ref.Page, true, "page %d is cached for another tenant", ref.Page)
	}
	if _, ok := p.cache.shares[shareKey{ref.Page, ref.Gen, o.ID}]; !ok {
		switch op {
		case opRelease, opQuarantine:
			return p.violateLocked(KindDoubleRelease, ref.Page, true, "cached page %d is not read by this sequence (released twice?)", ref.Page)
		case opRead:
			return p.violateLocked(KindForeignOwner, ref.Page, true, "cached page %d was not looked up by this sequence", ref.Page)
		}
	}
	if tagState(m.tag.Load()) == Quarantined && op != opRelease && op != opQuarantine {
		return p.violateLocked(KindQuarantined, ref.Page, false, "cached page %d is quarantined after an integrity violation", ref.Page)
	}
	switch op {
	case opWrite, opTransfer, opMark:
		return p.violateLocked(KindSealedWrite, ref.Page, true, "write to cached page %d: cached pages are read-only", ref.Page)
	}
	return nil
}

// --- LRU ----------------------------------------------------------------------

func (p *Pool) lruPushLocked(pg uint32) {
	c := &p.cache
	s := p.pageScopeLocked(pg)
	cm := &c.meta[pg]
	cm.onLRU = true
	c.idleSeq++
	cm.idleAt = c.idleSeq
	cm.prev, cm.next = s.tail, -1
	if s.tail != -1 {
		c.meta[s.tail].next = int32(pg)
	} else {
		s.head = int32(pg)
	}
	s.tail = int32(pg)
	s.idle++
	c.idle++
}

func (p *Pool) lruRemoveLocked(pg uint32) {
	c := &p.cache
	s := p.pageScopeLocked(pg)
	cm := &c.meta[pg]
	if cm.prev != -1 {
		c.meta[cm.prev].next = cm.next
	} else {
		s.head = cm.next
	}
	if cm.next != -1 {
		c.meta[cm.next].prev = cm.prev
	} else {
		s.tail = cm.prev
	}
	cm.prev, cm.next, cm.onLRU = -1, -1, false
	s.idle--
	c.idle--
}

// auditCacheLocked checks the cache's bookkeeping (audit): the LRU holds
// exactly the idle indexed entries, the index points at cached pages under
// their own key and tenant, reader counts equal the shares held, and every
// cached page is sealed or quarantined.
func (p *Pool) auditCacheLocked() error {
	c := &p.cache
	bad := func(format string, args ...any) error {
		return &Error{Code: CodeCorrupt, Msg: "prefix cache: " + fmt.Sprintf(format, args...)}
	}
	n := 0
	scopes := map[*scopeCache]bool{&c.public: true}
	for _, s := range c.scopes {
		scopes[s] = true
	}
	for s := range scopes {
		k := 0
		prev := int32(-1)
		for i := s.head; i != -1; i = c.meta[i].next {
			cm := &c.meta[i]
			if !cm.onLRU || cm.prev != prev || !cm.cached || !cm.indexed || cm.readers != 0 || p.pageScopeLocked(uint32(i)) != s ||
				(prev != -1 && c.meta[prev].idleAt >= cm.idleAt) {
				return bad("LRU corrupt at page %d", i)
			}
			prev = i
			if k++; k > len(c.meta) {
				return bad("LRU has a cycle")
			}
		}
		if prev != s.tail || k != s.idle {
			return bad("a scope's LRU holds %d pages, its counter says %d", k, s.idle)
		}
		n += k
	}
	if n != c.idle {
		return bad("LRUs hold %d pages, counter says %d", n, c.idle)
	}
	perScope := map[*scopeCache]int{}
	for ek, pg := range c.index {
		cm := &c.meta[pg]
		if !cm.cached || !cm.indexed || cm.key != ek.key || p.indexKeyLocked(pg) != ek ||
			cm.public != (p.pages[pg].tenant.Load() == PublicTenant) {
			return bad("index entry for page %d disagrees with the page", pg)
		}
	}
	readers := make([]int32, len(c.meta))
	for sk := range c.shares {
		if !c.meta[sk.page].cached || tagGen(p.pages[sk.page].tag.Load()) != sk.gen {
			return bad("a share names page %d, which is not cached at that generation", sk.page)
		}
		readers[sk.page]++
	}
	cached, indexed := 0, 0
	for i := range c.meta {
		cm := &c.meta[i]
		if cm.readers != readers[i] {
			return bad("page %d counts %d readers but %d shares are held", i, cm.readers, readers[i])
		}
		if !cm.cached {
			if cm.onLRU || cm.indexed || cm.readers != 0 {
				return bad("page %d is not cached but has cache state", i)
			}
			continue
		}
		cached++
		perScope[p.pageScopeLocked(uint32(i))]++
		if cm.indexed {
			indexed++
		}
		st := tagState(p.pages[i].tag.Load())
		if st != Sealed && st != Quarantined || (st == Sealed && !cm.indexed && cm.readers == 0) {
			return bad("cached page %d is %v (indexed %v, %d readers)", i, st, cm.indexed, cm.readers)
		}
		if cm.onLRU != (cm.indexed && cm.readers == 0) {
			return bad("page %d idle state disagrees with the LRU", i)
		}
		if !p.pages[i].live {
			return bad("cached page %d is not live", i)
		}
	}
	if cached != c.cached || indexed != len(c.index) {
		return bad("%d cached pages (%d indexed) but counters say %d (%d)", cached, indexed, c.cached, len(c.index))
	}
	for s := range scopes {
		if perScope[s] != s.cached || (s != &c.public && s.cached == 0) {
			return bad("a scope counts %d cached pages, %d are", s.cached, perScope[s])
		}
	}
	return nil
}
