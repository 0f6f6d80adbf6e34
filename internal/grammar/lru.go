package grammar

import "container/list"

// tenantLRU holds values that each belong to a tenant and weigh some
// bytes, bounded per tenant and in all, in entries and in bytes, each
// tenant's in least-recently-used order. Both the workers' compiled
// grammars (Cache) and the router's checked schemas (Checks) keep their
// entries in one, so they evict by the same rule:
//
//   - past its own bounds (perTenant entries, tenantBytes), a tenant drops
//     its own least recently used entries, nobody else's;
//   - past the bounds of the whole (max entries, maxBytes), the entry that
//     goes is the least recently used one of the tenant holding the most
//     (entries past max, bytes past maxBytes; heaviest), not the least
//     recently used of anyone: tenants filling the cache up to their own
//     bounds cannot push out the entries of a tenant holding less than
//     they do.
//
// The masks of Cache's grammars are made room for by the same rule
// (Cache.makeRoom). tenantLRU is not safe for concurrent use: its owner
// locks it.
type tenantLRU[V any] struct {
	perTenant, max        int
	tenantBytes, maxBytes int64

	entries map[[32]byte]*list.Element
	lists   map[string]*list.List // by tenant; front: most recent
	held    map[string]int64
	bytes   int64
	// gone is called with each entry's value as it leaves (nil: nothing).
	gone func(V)
}

type lruEntry[V any] struct {
	key    [32]byte
	tenant string
	size   int64
	v      V
}

func newTenantLRU[V any](perTenant, max int, tenantBytes, maxBytes int64, gone func(V)) tenantLRU[V] {
	return tenantLRU[V]{perTenant: perTenant, max: max, tenantBytes: tenantBytes, maxBytes: maxBytes,
		entries: map[[32]byte]*list.Element{}, lists: map[string]*list.List{}, held: map[string]int64{}, gone: gone}
}

// len is how many entries l holds; count how many are tenant's.
func (l *tenantLRU[V]) len() int { return len(l.entries) }

func (l *tenantLRU[V]) count(tenant string) int {
	if tl := l.lists[tenant]; tl != nil {
		return tl.Len()
	}
	return 0
}

// each calls f with every entry, each tenant's most recent first.
func (l *tenantLRU[V]) each(f func(*lruEntry[V])) {
	for _, tl := range l.lists {
		for e := tl.Front(); e != nil; e = e.Next() {
			f(e.Value.(*lruEntry[V]))
		}
	}
}

// get returns k's value, now its tenant's most recently used.
func (l *tenantLRU[V]) get(k [32]byte) (v V, ok bool) {
	e, ok := l.entries[k]
	if !ok {
		return v, false
	}
	le := e.Value.(*lruEntry[V])
	l.lists[le.tenant].MoveToFront(e)
	return le.v, true
}

// put adds tenant's v of size bytes under k (which is not in l), first
// making room as tenantLRU's doc says.
func (l *tenantLRU[V]) put(k [32]byte, tenant string, size int64, v V) {
	if l.count(tenant) >= l.perTenant {
		l.remove(l.oldest(tenant))
	}
	for l.count(tenant) > 0 && l.held[tenant]+size > l.tenantBytes {
		l.remove(l.oldest(tenant))
	}
	for l.len() >= l.max || l.bytes+size > l.maxBytes {
		weights := l.held
		if l.len() >= l.max {
			weights = map[string]int64{}
			for t, tl := range l.lists {
				weights[t] = int64(tl.Len())
			}
		}
		e := l.oldest(heaviest(weights))
		if e == nil {
			break
		}
		l.remove(e)
	}
	tl := l.lists[tenant]
	if tl == nil {
		tl = list.New()
		l.lists[tenant] = tl
	}
	l.entries[k] = tl.PushFront(&lruEntry[V]{key: k, tenant: tenant, size: size, v: v})
	l.held[tenant] += size
	l.bytes += size
}

// heaviest is the tenant of the largest weight (ties: the first name in
// byte order); "" when none weighs anything. It is the tenant that gives
// up room when the whole is full.
func heaviest(weights map[string]int64) string {
	heavy, most := "", int64(0)
	for t, n := range weights {
		if n > most || (n == most && n > 0 && t < heavy) {
			heavy, most = t, n
		}
	}
	return heavy
}

// oldest is tenant's least recently used entry (nil: none).
func (l *tenantLRU[V]) oldest(tenant string) *list.Element {
	return l.oldestWhere(tenant, func(*lruEntry[V]) bool { return true })
}

// oldestWhere is tenant's least recently used entry for which ok holds.
func (l *tenantLRU[V]) oldestWhere(tenant string, ok func(*lruEntry[V]) bool) *list.Element {
	tl := l.lists[tenant]
	if tl == nil {
		return nil
	}
	for e := tl.Back(); e != nil; e = e.Prev() {
		if ok(e.Value.(*lruEntry[V])) {
			return e
		}
	}
	return nil
}

func (l *tenantLRU[V]) remove(e *list.Element) {
	le := e.Value.(*lruEntry[V])
	tl := l.lists[le.tenant]
	tl.Remove(e)
	if tl.Len() == 0 {
		delete(l.lists, le.tenant)
	}
	delete(l.entries, le.key)
	l.bytes -= le.size
	if l.held[le.tenant] -= le.size; l.held[le.tenant] == 0 {
		delete(l.held, le.tenant)
	}
	if l.gone != nil {
		l.gone(le.v)
	}
}
