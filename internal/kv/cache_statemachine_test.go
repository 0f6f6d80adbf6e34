package kv

import (
	"errors"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The prefix cache against a model, over random start (lookup + extend
// under pressure) / fill (seal + insert) / read / release / evict /
// invalidate / cross-tenant lookup / forged foreign read / forged write /
// lease expiry sequences, two tenants and prompts that share pages.
// Properties, after every step:
//   - a lookup hits exactly the model's longest cached run for the
//     reader's tenant; a lookup by another tenant, even with the victim's
//     own keys, misses;
//   - a read returns exactly the rows the page's writer wrote (cached pages
//     included), never a scrubbed or foreign row;
//   - reader shares are conserved: the pool's count equals the shares the
//     model's live sequences hold, and each page's readers are the model's;
//   - eviction takes only idle entries, oldest first, and only when a
//     reservation needs it and can then fit;
//   - every page's state is the model's, and the pool's own audit holds;
//   - after everything is released and the leases pass, the pool is whole.

const csmPages = 7

type csSeq struct {
	o      Owner
	prompt int
	refs   []PageRef
	hits   int  // leading pages taken from the cache
	filled bool // private pages written, sealed and offered to the cache
}

type csPage struct {
	gen     uint64
	holder  *csSeq // private page
	cached  bool
	indexed bool
	tenant  string
	key     BlockKey
	readers map[*csSeq]bool
	writer  Owner // whose rows the page holds (valid once written)
	wgen    uint64
	written bool
	quar    bool
	until   int // lease end; -1: stamped at the next Expire
}

type csModel struct {
	p     *Pool
	now   int
	pages [csmPages]csPage
	lru   []uint32 // idle entries, oldest first
	live  []*csSeq
	id    byte
}

// csPrompts share pages: 0 and 1 share their first page; 2's second page
// holds 0's second page's tokens under another parent (another key).
var csPrompts = func() [][]int32 {
	a, b, c, d := prompt(1, 1), prompt(2, 1), prompt(3, 1), prompt(4, 1)
	cat := func(x ...[]int32) []int32 { return slices.Concat(x...) }
	return [][]int32{cat(a, b), cat(a, c), cat(d, b), cat(a, b, c)}
}()

func (m *csModel) keys(tenant string, pr int) []BlockKey {
	return PrefixKeys(testFP, saltOf(tenant), tg.PageSize, csPrompts[pr])
}

func (m *csModel) free() int {
	n := 0
	for i := range m.pages {
		mp := &m.pages[i]
		if mp.holder == nil && !mp.cached && !mp.quar {
			n++
		}
	}
	return n
}

func (m *csModel) indexed(tenant string, k BlockKey) (uint32, bool) {
	for i := range m.pages {
		mp := &m.pages[i]
		if mp.cached && mp.indexed && mp.tenant == tenant && mp.key == k {
			return uint32(i), true
		}
	}
	return 0, false
}

func (m *csModel) lruDrop(pg uint32) {
	if i := slices.Index(m.lru, pg); i >= 0 {
		m.lru = slices.Delete(m.lru, i, i+1)
	}
}

// cachedBy is how many cached pages tenant holds (read or idle).
func (m *csModel) cachedBy(tenant string) int {
	n := 0
	for i := range m.pages {
		if m.pages[i].cached && m.pages[i].tenant == tenant {
			n++
		}
	}
	return n
}

// oldestIdle is tenant's oldest idle entry, if any.
func (m *csModel) oldestIdle(tenant string) (uint32, bool) {
	for _, pg := range m.lru {
		if m.pages[pg].tenant == tenant {
			return pg, true
		}
	}
	return 0, false
}

// share models shareLocked with every weight 1 and no public scope: the
// pool's pages over the tenants holding cached pages, tenant included.
func (m *csModel) share(tenant string) int {
	ts := map[string]bool{tenant: true}
	for i := range m.pages {
		if m.pages[i].cached {
			ts[m.pages[i].tenant] = true
		}
	}
	return max(1, csmPages/len(ts))
}

// inUse is the private pages tenant's sequences hold (not quarantined).
func (m *csModel) inUse(tenant string) int {
	n := 0
	for i := range m.pages {
		if h := m.pages[i].holder; h != nil && !m.pages[i].quar && h.o.Tenant == tenant {
			n++
		}
	}
	return n
}

// poolShare models holdShareLocked's share with every weight 1: the pool's
// pages over the tenants holding pages in use or cached, tenant included.
func (m *csModel) poolShare(tenant string) int {
	ts := map[string]bool{tenant: true}
	for i := range m.pages {
		mp := &m.pages[i]
		if mp.holder != nil && !mp.quar {
			ts[mp.holder.o.Tenant] = true
		}
		if mp.cached {
			ts[mp.tenant] = true
		}
	}
	return csmPages / len(ts)
}

// evictBudget models evictForLocked's limit for a reservation of n pages
// by tenant: nil when it may evict any idle entry (it stays within its
// pool share, counting its pages in use and its cached ones, read or
// idle), else what each tenant's idle entries may lose (its own all,
// another's its excess over its cache share); room is their sum.
func (m *csModel) evictBudget(tenant string, n int) (budget map[string]int, room int) {
	if m.inUse(tenant)+m.cachedBy(tenant)+n <= m.poolShare(tenant) {
		return nil, len(m.lru)
	}
	budget = map[string]int{}
	for _, pg := range m.lru {
		budget[m.pages[pg].tenant]++
	}
	for t, b := range budget {
		if t != tenant {
			budget[t] = min(b, max(0, m.cachedBy(t)-m.share(t)))
		}
		room += budget[t]
	}
	return budget, room
}

// victim models victimForLocked: the oldest idle entry of the tenant with
// the most cached pages; ties go to own (the tenant reserving, "" none),
// then to the tenant whose oldest idle entry is older (m.lru is in idle
// order). With a budget, only among the tenants with budget left.
func (m *csModel) victim(budget map[string]int, own string) uint32 {
	best, bestN := uint32(0), -1
	seen := map[string]bool{}
	for _, pg := range m.lru {
		t := m.pages[pg].tenant
		if seen[t] || (budget != nil && budget[t] <= 0) {
			continue
		}
		seen[t] = true
		// A tie goes to the reserving tenant's own entries, then to the
		// oldest (victimForLocked): a flood evicts its own first.
		if n := m.cachedBy(t); n > bestN || (n == bestN && own != "" && t == own) {
			best, bestN = pg, n
		}
	}
	return best
}

// evictPage models evictLocked of an idle entry.
func (m *csModel) evictPage(pg uint32) {
	m.lruDrop(pg)
	m.pages[pg] = csPage{gen: m.pages[pg].gen}
}

// evictOldest models the pool's next eviction (victimLocked).
func (m *csModel) evictOldest() { m.evictPage(m.victim(nil, "")) }

// quarantine models quarantineLocked of a cached page.
func (m *csModel) quarantine(pg uint32) {
	mp := &m.pages[pg]
	if mp.quar {
		return
	}
	mp.quar, mp.indexed = true, false
	m.lruDrop(pg)
	if len(mp.readers) == 0 {
		mp.cached, mp.until = false, -1
	}
}

// dropShare models dropShareLocked.
func (m *csModel) dropShare(s *csSeq, pg uint32) {
	mp := &m.pages[pg]
	delete(mp.readers, s)
	if len(mp.readers) > 0 {
		return
	}
	switch {
	case mp.quar:
		mp.cached, mp.until = false, -1
	case mp.indexed:
		m.lru = append(m.lru, pg)
	default:
		m.pages[pg] = csPage{gen: mp.gen}
	}
}

func (m *csModel) release(t *rapid.T, i int) {
	s := m.live[i]
	if err := m.p.Release(s.o, s.refs); err != nil {
		t.Fatalf("release: %v", err)
	}
	for b := len(s.refs) - 1; b >= 0; b-- {
		pg := s.refs[b].Page
		if m.pages[pg].cached {
			m.dropShare(s, pg)
		} else {
			m.pages[pg] = csPage{gen: m.pages[pg].gen} // private: freed even if quarantined
		}
	}
	m.live = slices.Delete(m.live, i, i+1)
}

func TestCacheStateMachine(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p, err := New(Config{Geometry: tg, Pages: csmPages, Order: LIFO, Scrub: ScrubPoison, Lease: smLease * time.Second})
		if err != nil {
			rt.Fatal(err)
		}
		defer p.Close()
		m := &csModel{p: p}
		tenants := []string{"t1", "t2"}
		rt.Repeat(map[string]func(*rapid.T){
			"": m.check,
			"start": func(t *rapid.T) {
				m.id++
				s := &csSeq{o: Owner{Tenant: rapid.SampledFrom(tenants).Draw(t, "tenant"), ID: ID{m.id}},
					prompt: rapid.IntRange(0, len(csPrompts)-1).Draw(t, "prompt")}
				keys := m.keys(s.o.Tenant, s.prompt)
				hit, err := p.Lookup(s.o, keys)
				if err != nil {
					t.Fatal(err)
				}
				want := 0
				for _, k := range keys {
					if _, ok := m.indexed(s.o.Tenant, k); !ok {
						break
					}
					want++
				}
				if len(hit) != want {
					t.Fatalf("lookup hit %d pages, model %d", len(hit), want)
				}
				for i, r := range hit {
					pg, _ := m.indexed(s.o.Tenant, keys[i])
					if r.Page != pg || r.Gen != m.pages[pg].gen {
						t.Fatalf("hit %d is page %d gen %d, model page %d gen %d", i, r.Page, r.Gen, pg, m.pages[pg].gen)
					}
					mp := &m.pages[pg]
					if len(mp.readers) == 0 {
						m.lruDrop(pg)
					}
					mp.readers[s] = true
				}
				s.hits = len(hit)
				rest := len(keys) - len(hit)
				// What the reservation may use (the colocated engine's
				// free-page watermark weighs it): the free pages and the
				// idle entries it may evict, never another tenant's
				// within that tenant's cache share while it is over its own.
				if _, mroom := m.evictBudget(s.o.Tenant, rest); p.AvailableFor(s.o.Tenant, rest) != m.free()+mroom {
					t.Fatalf("AvailableFor(%s, %d) = %d, model %d free + %d it may evict", s.o.Tenant, rest, p.AvailableFor(s.o.Tenant, rest), m.free(), mroom)
				}
				budget, room := map[string]int(nil), len(m.lru)
				if rest > m.free() && rest <= m.free()+len(m.lru) {
					budget, room = m.evictBudget(s.o.Tenant, rest)
				}
				tbl, err := p.Extend(s.o, hit, rest)
				if rest > m.free()+room {
					if !errors.Is(err, ErrNoCapacity) {
						t.Fatalf("extend by %d with %d free + %d idle it may evict: %v", rest, m.free(), room, err)
					}
					s.refs = hit
					m.live = append(m.live, s)
					m.release(t, len(m.live)-1)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				for rest > m.free() {
					pg := m.victim(budget, s.o.Tenant)
					if budget != nil {
						budget[m.pages[pg].tenant]--
					}
					m.evictPage(pg)
				}
				for _, r := range tbl[len(hit):] {
					mp := &m.pages[r.Page]
					if mp.holder != nil || mp.cached || mp.quar || r.Gen <= mp.gen {
						t.Fatalf("page %d handed out in use or with an old generation", r.Page)
					}
					*mp = csPage{holder: s, gen: r.Gen}
				}
				s.refs = tbl
				m.live = append(m.live, s)
			},
			"fill": func(t *rapid.T) {
				if len(m.live) == 0 {
					nothingToDo(t)
				}
				_, s := pick(t, m.live, "seq")
				if s.filled {
					t.Skip()
				}
				s.filled = true
				priv := s.refs[s.hits:]
				v := p.View(s.o, s.refs)
				for l := range tg.Layers {
					for pos := s.hits * tg.PageSize; pos < len(s.refs)*tg.PageSize; pos++ {
						g := s.refs[pos/tg.PageSize].Gen
						if err := v.Put(l, pos, row(s.o, g, l, pos, false, tg.KVDim), row(s.o, g, l, pos, true, tg.KVDim)); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := p.Seal(s.o, priv); err != nil {
					t.Fatal(err)
				}
				keys := m.keys(s.o.Tenant, s.prompt)
				for i, r := range priv {
					mp := &m.pages[r.Page]
					mp.writer, mp.wgen, mp.written = s.o, r.Gen, true
					k := keys[s.hits+i]
					_, dup := m.indexed(s.o.Tenant, k)
					// At its share, a tenant's own oldest idle entry makes
					// room; with none idle the page stays private.
					want := !dup
					if want && m.cachedBy(s.o.Tenant) >= m.share(s.o.Tenant) {
						if own, ok := m.oldestIdle(s.o.Tenant); ok {
							m.evictPage(own)
						} else {
							want = false
						}
					}
					ok, err := p.Insert(s.o, r, k)
					if err != nil || ok != want {
						t.Fatalf("insert (model duplicate %v, %d cached of a share of %d): %v %v, want %v", dup, m.cachedBy(s.o.Tenant), m.share(s.o.Tenant), ok, err, want)
					}
					if ok {
						mp.holder, mp.cached, mp.indexed, mp.tenant, mp.key = nil, true, true, s.o.Tenant, k
						mp.readers = map[*csSeq]bool{s: true}
					}
				}
			},
			"read": func(t *rapid.T) {
				if len(m.live) == 0 {
					nothingToDo(t)
				}
				_, s := pick(t, m.live, "seq")
				b := rapid.IntRange(0, len(s.refs)-1).Draw(t, "blk")
				l := rapid.IntRange(0, tg.Layers-1).Draw(t, "layer")
				ref := s.refs[b]
				mp := &m.pages[ref.Page]
				if !mp.written {
					t.Skip()
				}
				k, v, n, err := p.View(s.o, s.refs).Block(l, b)
				if mp.quar {
					wantKind(t, err, KindQuarantined)
					return
				}
				if err != nil || n != tg.PageSize {
					t.Fatalf("read: %d %v", n, err)
				}
				for i := range n {
					pos := b*tg.PageSize + i
					if !sameBits(k[i*tg.KVDim:(i+1)*tg.KVDim], row(mp.writer, mp.wgen, l, pos, false, tg.KVDim)) ||
						!sameBits(v[i*tg.KVDim:(i+1)*tg.KVDim], row(mp.writer, mp.wgen, l, pos, true, tg.KVDim)) {
						t.Fatalf("read of page %d slot %d is not its writer's row", ref.Page, i)
					}
				}
			},
			"release": func(t *rapid.T) {
				if len(m.live) == 0 {
					nothingToDo(t)
				}
				i, _ := pick(t, m.live, "seq")
				m.release(t, i)
			},
			"evict": func(t *rapid.T) {
				n := rapid.IntRange(0, 3).Draw(t, "n")
				want := min(n, len(m.lru))
				if got := p.EvictIdle(n); got != want {
					t.Fatalf("evicted %d, model %d", got, want)
				}
				for range want {
					m.evictOldest()
				}
			},
			"invalidate": func(t *rapid.T) {
				tn := rapid.SampledFrom(tenants).Draw(t, "tenant")
				want := 0
				for i := range m.pages {
					mp := &m.pages[i]
					if !mp.cached || !mp.indexed || mp.tenant != tn {
						continue
					}
					want++
					if len(mp.readers) == 0 {
						m.lruDrop(uint32(i))
						m.pages[i] = csPage{gen: mp.gen}
					} else {
						mp.indexed = false
					}
				}
				if got := p.InvalidateTenant(tn); got != want {
					t.Fatalf("invalidated %d, model %d", got, want)
				}
			},
			"crossLookup": func(t *rapid.T) {
				// Another tenant presents the victim's own keys: a miss.
				m.id++
				victim := rapid.SampledFrom(tenants).Draw(t, "victim")
				thief := Owner{Tenant: victim + "-other", ID: ID{m.id}}
				if thief.Tenant == victim {
					t.Skip()
				}
				hit, err := p.Lookup(thief, m.keys(victim, rapid.IntRange(0, len(csPrompts)-1).Draw(t, "prompt")))
				if err != nil || len(hit) != 0 {
					t.Fatalf("cross-tenant lookup hit %v %v", hit, err)
				}
			},
			"forgedForeignRead": func(t *rapid.T) {
				if len(m.live) == 0 {
					nothingToDo(t)
				}
				_, s := pick(t, m.live, "seq")
				b := rapid.IntRange(0, len(s.refs)-1).Draw(t, "blk")
				ref := s.refs[b]
				if !m.pages[ref.Page].cached {
					t.Skip()
				}
				forger := Owner{Tenant: "t1", ID: s.o.ID}
				if s.o.Tenant == "t1" {
					forger.Tenant = "t2"
				}
				before := append([]float32(nil), p.f32...)
				k, _, _, err := p.View(forger, s.refs).Block(0, b)
				if k != nil {
					t.Fatal("a forged foreign view read a cached page")
				}
				wantKind(t, err, KindForeignOwner)
				m.quarantine(ref.Page)
				if !sameBits(before, p.f32) {
					t.Fatal("a refused read changed memory")
				}
			},
			"forgedWrite": func(t *rapid.T) {
				if len(m.live) == 0 {
					nothingToDo(t)
				}
				_, s := pick(t, m.live, "seq")
				b := rapid.IntRange(0, len(s.refs)-1).Draw(t, "blk")
				ref := s.refs[b]
				mp := &m.pages[ref.Page]
				if !mp.cached {
					t.Skip()
				}
				before := append([]float32(nil), p.f32...)
				var err error
				if rapid.Bool().Draw(t, "transfer") {
					err = p.WritePage(s.o, ref, tg.PageSize, make([]byte, tg.PageBytes()))
				} else {
					err = p.View(s.o, s.refs).Put(0, b*tg.PageSize, make([]float32, tg.KVDim), make([]float32, tg.KVDim))
				}
				if mp.quar {
					wantKind(t, err, KindQuarantined)
				} else {
					wantKind(t, err, KindSealedWrite)
					m.quarantine(ref.Page)
				}
				if !sameBits(before, p.f32) {
					t.Fatal("a refused write changed memory")
				}
			},
			"tick": func(t *rapid.T) {
				m.now += rapid.IntRange(1, 3).Draw(t, "dt")
				want := 0
				for pg := range m.pages {
					mp := &m.pages[pg]
					switch {
					case !mp.quar || mp.cached:
					case mp.until == -1:
						mp.until = m.now + smLease
					case m.now >= mp.until:
						m.pages[pg] = csPage{gen: mp.gen}
						want++
					}
				}
				if got := p.Expire(m.at(m.now)); got != want {
					t.Fatalf("Expire freed %d pages, model %d", got, want)
				}
			},
		})
		for len(m.live) > 0 {
			m.release(rt, 0)
		}
		m.check(rt)
		p.Expire(m.at(m.now))
		p.Expire(m.at(m.now + 100))
		if err := p.CheckDrained(); err != nil {
			rt.Fatal(err)
		}
		p.EvictIdle(-1)
		if st := p.Stats(); st.Free != st.Pages || st.Cached != 0 || st.CacheReaders != 0 {
			rt.Fatalf("pool not whole after releasing everything: %+v", st)
		}
		if err := p.audit(); err != nil {
			rt.Fatal(err)
		}
	})
}

func (m *csModel) at(sec int) time.Time { return time.Unix(int64(1_000_000+sec), 0) }

func (m *csModel) check(t *rapid.T) {
	if err := m.p.audit(); err != nil {
		t.Fatal(err)
	}
	st := m.p.Stats()
	shares, cached := 0, 0
	for _, s := range m.live {
		for _, r := range s.refs {
			if m.pages[r.Page].cached {
				shares++
			}
		}
	}
	for pg := range m.pages {
		mp := &m.pages[pg]
		want := Free
		switch {
		case mp.quar:
			want = Quarantined
		case mp.cached || (mp.holder != nil && mp.holder.filled):
			want = Sealed
		case mp.holder != nil:
			want = Reserved
		}
		if got := tagState(m.p.pages[pg].tag.Load()); got != want {
			t.Fatalf("page %d is %v, model %v", pg, got, want)
		}
		if mp.cached {
			cached++
			if got := m.p.cache.meta[pg].readers; int(got) != len(mp.readers) {
				t.Fatalf("page %d has %d readers, model %d", pg, got, len(mp.readers))
			}
		}
	}
	if st.CacheReaders != shares || st.Cached != cached || st.CacheIdle != len(m.lru) {
		t.Fatalf("cache stats %d readers %d cached %d idle, model %d %d %d", st.CacheReaders, st.Cached, st.CacheIdle, shares, cached, len(m.lru))
	}
	for tn, sc := range m.p.cache.scopes {
		pg, ok := m.oldestIdle(tn)
		if (sc.head != -1) != ok || (ok && sc.head != int32(pg)) {
			t.Fatalf("tenant %s's LRU head is page %d, model %d (%v)", tn, sc.head, pg, ok)
		}
		if sc.cached != m.cachedBy(tn) {
			t.Fatalf("tenant %s caches %d pages, model %d", tn, sc.cached, m.cachedBy(tn))
		}
	}
}
