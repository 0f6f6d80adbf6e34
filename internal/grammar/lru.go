package grammar

import "container/list"

// tenantLRU is a least-recently-used list of values that each belong to a
// tenant and weigh some bytes, bounded per tenant and in all, in entries
// and in bytes. Both the workers' compiled grammars (Cache) and the
// router's checked schemas (Checked) keep their entries in one, so they
// evict by the same rule:
//
//   - past its own bounds (perTenant entries, tenantBytes), a tenant drops
//     its own least recently used entries, nobody else's;
//   - past the bounds of the whole (max entries, maxBytes), the entry that
//     goes is the least recently used one of the tenant holding the most
//     (heaviest), not the least recently used of anyone: tenants filling
//     the cache up to their own bounds cannot push out the entries of a
//     tenant holding less than they do.
//
// The masks of Cache's grammars are made room for by the same rule
// (Cache.makeRoom). tenantLRU is not safe for concurrent use: its owner
// locks it.
type tenantLRU[V any] struct {
	perTenant, max        int
	tenantBytes, maxBytes int64

	entries map[[32]byte]*list.Element
	lru     *list.List // front: most recent
	count   map[string]int
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
		entries: map[[32]byte]*list.Element{}, lru: list.New(), count: map[string]int{}, held: map[string]int64{}, gone: gone}
}

// get returns k's value, now the most recently used.
func (l *tenantLRU[V]) get(k [32]byte) (v V, ok bool) {
	e, ok := l.entries[k]
	if !ok {
		return v, false
	}
	l.lru.MoveToFront(e)
	return e.Value.(*lruEntry[V]).v, true
}

// put adds tenant's v of size bytes under k (which is not in l), first
// making room as tenantLRU's doc says.
func (l *tenantLRU[V]) put(k [32]byte, tenant string, size int64, v V) {
	if l.count[tenant] >= l.perTenant {
		l.remove(l.oldest(tenant))
	}
	for l.count[tenant] > 0 && l.held[tenant]+size > l.tenantBytes {
		l.remove(l.oldest(tenant))
	}
	for l.lru.Len() >= l.max || l.bytes+size > l.maxBytes {
		weight := func(e *lruEntry[V]) int64 { return e.size }
		if l.lru.Len() >= l.max {
			weight = func(*lruEntry[V]) int64 { return 1 }
		}
		e := l.oldest(l.heaviest(weight))
		if e == nil {
			break
		}
		l.remove(e)
	}
	l.entries[k] = l.lru.PushFront(&lruEntry[V]{key: k, tenant: tenant, size: size, v: v})
	l.count[tenant]++
	l.held[tenant] += size
	l.bytes += size
}

// heaviest is the tenant whose entries weigh the most by weight (ties:
// the first name in byte order); "" when none weighs anything. It is the
// tenant that gives up room when the whole is full.
func (l *tenantLRU[V]) heaviest(weight func(*lruEntry[V]) int64) string {
	sum := map[string]int64{}
	for e := l.lru.Front(); e != nil; e = e.Next() {
		le := e.Value.(*lruEntry[V])
		sum[le.tenant] += weight(le)
	}
	heavy, most := "", int64(0)
	for t, n := range sum {
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
	for e := l.lru.Back(); e != nil; e = e.Prev() {
		if le := e.Value.(*lruEntry[V]); le.tenant == tenant && ok(le) {
			return e
		}
	}
	return nil
}

func (l *tenantLRU[V]) remove(e *list.Element) {
	le := e.Value.(*lruEntry[V])
	l.lru.Remove(e)
	delete(l.entries, le.key)
	if l.count[le.tenant]--; l.count[le.tenant] == 0 {
		delete(l.count, le.tenant)
	}
	l.bytes -= le.size
	if l.held[le.tenant] -= le.size; l.held[le.tenant] == 0 {
		delete(l.held, le.tenant)
	}
	if l.gone != nil {
		l.gone(le.v)
	}
}
