package kv

import (
	"errors"
	"testing"
)

// insertAll seals o's private refs and offers each to the cache; it
// returns how many were cached.
func insertAll(t *testing.T, p *Pool, o Owner, toks []int32) ([]PageRef, []BlockKey, int) {
	t.Helper()
	keys := PrefixKeys(testFP, saltOf(o.Tenant), tg.PageSize, toks)
	refs, err := p.Reserve(o, len(keys))
	if err != nil {
		t.Fatal(err)
	}
	fill(t, p.View(o, refs), refs, 0, len(toks))
	if err := p.Seal(o, refs); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, r := range refs {
		ok, err := p.Insert(o, r, keys[i])
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			n++
		}
	}
	return refs, keys, n
}

// A tenant flooding the cache with unique prompts evicts its own entries,
// never another tenant's within that tenant's share: B's cached prefix
// survives 200 of A's unique prompts, and A never holds more than its
// share (half the pool: two tenants of weight 1) at any moment.
func TestCacheFloodEvictsOwnPagesFirst(t *testing.T) {
	p := newPool(t, 16)
	b := owner("b", 1)
	refsB, keysB := cachedSeq(t, p, b, prompt(7, 4))
	if err := p.Release(b, refsB); err != nil { // idle: evictable
		t.Fatal(err)
	}
	for i := range 200 {
		a := owner("a", byte(2+i%200))
		refs, _, _ := insertAll(t, p, a, prompt(int32(100+i), 3))
		if err := p.Release(a, refs); err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		got, share := p.cache.scopes["a"].cached, p.shareLocked("a")
		p.mu.Unlock()
		if got > share || share != 8 {
			t.Fatalf("round %d: tenant a caches %d pages, its share is %d (want 8)", i, got, share)
		}
		if err := p.Audit(); err != nil {
			t.Fatal(err)
		}
	}
	if h, err := p.Lookup(owner("b", 250), keysB); err != nil || len(h) != 4 {
		t.Fatalf("B's prefix after A's flood: %d of 4 pages hit (%v)", len(h), err)
	}
}

// Allocation under pressure takes from the tenant most over its weighted
// share: with weights a=1, b=3, a tenant b holding 6 pages (under its share
// of 12) keeps them while a's 5 (over its 4) go first. The reserving
// tenant x (weight 10) stays within its share of the pool, so it may evict
// any tenant's entries (see TestCacheHeldWithinShareSurvivesOverShareTenant).
func TestCacheEvictionTakesFromTheMostOverShare(t *testing.T) {
	p := newPool(t, 16, func(c *Config) {
		c.CacheWeight = func(t string) int {
			switch t {
			case "b":
				return 3
			case "x":
				return 10
			}
			return 1
		}
	})
	refsB, keysB := cachedSeq(t, p, owner("b", 1), prompt(1, 6))
	refsA, keysA := cachedSeq(t, p, owner("a", 2), prompt(2, 4))
	if err := p.Release(owner("b", 1), refsB); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(owner("a", 2), refsA); err != nil {
		t.Fatal(err)
	}
	// 6 free pages: a reservation of 8 evicts 2, both a's (a: 4 cached
	// for weight 1 against b's 6 for weight 3; then 3 against 2).
	x := owner("x", 3)
	r, err := p.Reserve(x, 8)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := p.Lookup(owner("b", 4), keysB); len(h) != 6 {
		t.Fatalf("b kept %d of 6 pages; a's should have gone first", len(h))
	}
	if h, _ := p.Lookup(owner("a", 5), keysA); len(h) != 2 {
		t.Fatalf("a kept %d of 4 pages, want its chain's first 2", len(h))
	}
	if err := p.Release(x, r); err != nil {
		t.Fatal(err)
	}
}

// The public scope has its own budget: beyond it a public insert evicts
// the scope's own oldest idle entry, or is refused when none is idle; a
// tenant's flood never evicts public entries while any tenant entry is
// idle.
func TestCachePublicBudget(t *testing.T) {
	p := newPool(t, 16, func(c *Config) { c.PublicCachePages = 2 })
	op := owner("t", 1)
	toks := prompt(9, 3)
	keys := PrefixKeys(testFP, Salt{}, tg.PageSize, toks)
	refs, err := p.Reserve(op, 3)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, p.View(op, refs), refs, 0, len(toks))
	if err := p.Seal(op, refs); err != nil {
		t.Fatal(err)
	}
	var okN int
	for i, r := range refs {
		if ok, err := p.InsertPublic(op, r, keys[i]); err != nil {
			t.Fatal(err)
		} else if ok {
			okN++
		}
	}
	if okN != 2 {
		t.Fatalf("%d public pages cached with a budget of 2 and none idle", okN)
	}
	if err := p.Release(op, refs); err != nil {
		t.Fatal(err)
	}
	// A flood by tenant a: the two public pages stay as long as a has idle
	// entries of its own to give.
	for i := range 50 {
		a := owner("a", byte(10+i))
		r, _, _ := insertAll(t, p, a, prompt(int32(300+i), 4))
		if err := p.Release(a, r); err != nil {
			t.Fatal(err)
		}
	}
	if h, _ := p.LookupPublic(owner("c", 99), keys[:2], 2); len(h) != 2 {
		t.Fatalf("public entries after a tenant's flood: %d of 2", len(h))
	}
	if err := p.Audit(); err != nil {
		t.Fatal(err)
	}
}

// A tenant that would hold more than its share of the pool in use cannot
// evict another tenant's cached pages within that tenant's cache share
// (issue 28's crowding-out): a floods reservations, b's 4 cached pages
// survive, a's reservation beyond what it may take fails instead; b itself
// (within its share) may still evict a's idle entries.
func TestCacheHeldWithinShareSurvivesOverShareTenant(t *testing.T) {
	p := newPool(t, 16)
	refsB, keysB := cachedSeq(t, p, owner("b", 1), prompt(1, 4))
	if err := p.Release(owner("b", 1), refsB); err != nil {
		t.Fatal(err)
	}
	// a takes the 12 free pages: within nothing's way.
	a := owner("a", 2)
	held, err := p.Reserve(a, 12)
	if err != nil {
		t.Fatal(err)
	}
	// a holds 12 of 16 (its share is 8): b's idle pages are not a's to take.
	if r, err := p.Reserve(owner("a", 3), 1); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("a over its share evicted b's cached page: %v %v", r, err)
	}
	if h, _ := p.Lookup(owner("b", 4), keysB); len(h) != 4 {
		t.Fatalf("b kept %d of its 4 cached pages", len(h))
	} else if err := p.Release(owner("b", 4), h); err != nil {
		t.Fatal(err)
	}
	if err := p.Audit(); err != nil {
		t.Fatal(err)
	}
	// A tenant within its share may evict anyone's idle pages (work-
	// conserving): with a's pages back and c holding 9 in use, c's share
	// 5 of 16, x's reservation of 5 (its share) evicts 2 of b's.
	if err := p.Release(a, held); err != nil {
		t.Fatal(err)
	}
	c, err := p.Reserve(owner("c", 5), 9)
	if err != nil {
		t.Fatal(err)
	}
	x, err := p.Reserve(owner("x", 6), 5)
	if err != nil {
		t.Fatalf("x within its share could not evict idle pages: %v", err)
	}
	if h, _ := p.Lookup(owner("b", 7), keysB); len(h) != 2 {
		t.Fatalf("b kept %d of its 4 cached pages, want 2", len(h))
	} else {
		_ = p.Release(owner("b", 7), h)
	}
	_ = p.Release(owner("c", 5), c)
	_ = p.Release(owner("x", 6), x)
	if err := p.Audit(); err != nil {
		t.Fatal(err)
	}
}

// A running sequence's prompt pages are cache entries from the prompt's
// end (read by it): they count in its tenant's hold of the pool. Tenant a
// reads its 6 cached prompt pages and asks for 7 more of a 16-page pool
// (its share 8): over its share, it may not evict b's 4 idle pages within
// b's cache share, so the reservation fails and b's prefix stays whole;
// AvailableFor counts only the 6 free pages as a's. (Counting pages in use
// alone, a held "0 + 7 <= 8" and evicted one of b's pages.)
func TestCachedPagesCountInHold(t *testing.T) {
	p := newPool(t, 16)
	refsB, keysB := cachedSeq(t, p, owner("b", 1), prompt(1, 4))
	if err := p.Release(owner("b", 1), refsB); err != nil {
		t.Fatal(err)
	}
	a := owner("a", 2)
	refsA, _ := cachedSeq(t, p, a, prompt(2, 6)) // read by a: not idle
	if got := p.AvailableFor("a", 7); got != 6 {
		t.Errorf("AvailableFor(a, 7) = %d, want the 6 free pages", got)
	}
	if got := p.AvailableFor("b", 2); got != 10 {
		t.Errorf("AvailableFor(b, 2) = %d, want 6 free + its own 4 idle", got)
	}
	if r, err := p.Reserve(owner("a", 3), 7); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("a over its share (6 cached + 7) evicted b's cached page: %v %v", r, err)
	}
	if h, _ := p.Lookup(owner("b", 4), keysB); len(h) != 4 {
		t.Fatalf("b kept %d of its 4 cached pages", len(h))
	} else if err := p.Release(owner("b", 4), h); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(a, refsA); err != nil {
		t.Fatal(err)
	}
	if err := p.Audit(); err != nil {
		t.Fatal(err)
	}
}
