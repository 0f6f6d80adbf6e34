package kv

import (
	"errors"

	"testing"
	"time"

	"pgregory.net/rapid"
)

// The tenant page counts (hold.go) against a full recount, over random
// sequences of every operation that changes a page's state, cache
// membership or tenant: reserve, extend, write and seal, private and
// public inserts, lookups, release, one-sided quarantine with drain acks
// and lease expiry, a foreign release (a violation that quarantines an
// in-use or cached page, read or not), idle eviction and invalidation,
// three tenants of weights 1, 2 and 3. After every step:
//   - the pool's audit holds, which compares every tenant's count with
//     recountHeldLocked (a pass over every page) and the holding list
//     with the counts;
//   - Counts (the load report's O(1) counters) equal Stats' recount;
//   - AvailableFor equals availableForByRecount, the O(pages) formula it
//     replaced (holdShareLocked over a recount, each scope's cache share
//     computed on its own), for every tenant and several sizes.
func TestHoldCountsEqualRecount(t *testing.T) {
	const pages = 9
	tenants := []string{"t1", "t2", "t3"}
	weight := func(t string) int { return map[string]int{"t1": 1, "t2": 2, "t3": 3}[t] }
	rapid.Check(t, func(rt *rapid.T) {
		cfg := Config{Geometry: tg, Pages: pages, Order: LIFO, Lease: time.Second, CacheWeight: weight}
		if rapid.Bool().Draw(rt, "publicBudget") {
			cfg.PublicCachePages = 2
		}
		if rapid.Bool().Draw(rt, "verify") {
			// Seal digests checked at lookup and by sweeps: a page whose
			// bytes changed is quarantined, cached or in use, read or not.
			cfg.Verify = VerifyAll
		}
		p, err := New(cfg)
		if err != nil {
			rt.Fatal(err)
		}
		defer p.Close()
		type seq struct {
			o      Owner
			refs   []PageRef
			sealed bool
		}
		var live []*seq
		nextID := byte(0)
		newOwner := func(tenant string) Owner {
			nextID++
			return Owner{Tenant: tenant, ID: ID{nextID, 0xfe}}
		}
		now := 0
		at := func() time.Time { return time.Unix(int64(1_000_000+now), 0) }
		keyOf := func(tenant string, i int) BlockKey {
			return BlockKey{byte(i), tenant[1], 0x5a}
		}
		drop := func(i int) { live = append(live[:i], live[i+1:]...) }
		pickSeq := func(rt *rapid.T) (int, *seq) {
			i := rapid.IntRange(0, len(live)-1).Draw(rt, "seq")
			return i, live[i]
		}
		rt.Repeat(map[string]func(*rapid.T){
			"reserve": func(rt *rapid.T) {
				tn := rapid.SampledFrom(tenants).Draw(rt, "tenant")
				o := newOwner(tn)
				var refs []PageRef
				if rapid.Bool().Draw(rt, "lookup") {
					n := rapid.IntRange(1, 3).Draw(rt, "keys")
					keys := make([]BlockKey, n)
					for i := range keys {
						keys[i] = keyOf(tn, i)
					}
					pub := 0
					if rapid.Bool().Draw(rt, "public") {
						pub = n
						for i := range keys {
							keys[i] = keyOf("p_", i)
						}
					}
					var err error
					if refs, err = p.LookupPublic(o, keys, pub); err != nil {
						okViolation(rt, err) // a corrupted entry, quarantined
						return
					}
				}
				n := rapid.IntRange(0, 4).Draw(rt, "pages")
				all, err := p.Extend(o, refs, n)
				if err != nil {
					if len(refs) > 0 {
						if err := p.Release(o, refs); err != nil {
							rt.Fatal(err)
						}
					}
					return
				}
				live = append(live, &seq{o: o, refs: all})
			},
			"sealInsert": func(rt *rapid.T) {
				if len(live) == 0 {
					rt.Skip("no sequence")
				}
				_, s := pickSeq(rt)
				if !s.sealed {
					for b, ref := range s.refs {
						if p.cache.meta[ref.Page].cached {
							continue
						}
						okViolation(rt, p.WritePage(s.o, ref, tg.PageSize, pageImage(s.o, ref.Gen, b, tg.PageSize)))
					}
					okViolation(rt, p.Seal(s.o, s.refs))
					s.sealed = true
				}
				pub := rapid.Bool().Draw(rt, "public")
				for i, ref := range s.refs {
					var err error
					if pub {
						_, err = p.InsertPublic(s.o, ref, keyOf("p_", i))
					} else {
						_, err = p.Insert(s.o, ref, keyOf(s.o.Tenant, i))
					}
					okViolation(rt, err)
				}
			},
			"release": func(rt *rapid.T) {
				if len(live) == 0 {
					rt.Skip("no sequence")
				}
				i, s := pickSeq(rt)
				okViolation(rt, p.Release(s.o, s.refs))
				drop(i)
			},
			"quarantine": func(rt *rapid.T) {
				if len(live) == 0 {
					rt.Skip("no sequence")
				}
				i, s := pickSeq(rt)
				p.Quarantine(s.o, s.refs, time.Time{})
				if rapid.Bool().Draw(rt, "ack") {
					p.DrainAck(s.o, s.refs)
				}
				drop(i)
			},
			"foreignRelease": func(rt *rapid.T) {
				if len(live) == 0 {
					rt.Skip("no sequence")
				}
				_, s := pickSeq(rt)
				if len(s.refs) == 0 {
					rt.Skip("no page")
				}
				b := rapid.IntRange(0, len(s.refs)-1).Draw(rt, "block")
				if err := p.Release(newOwner(s.o.Tenant), s.refs[b:b+1]); err == nil {
					rt.Fatal("a release by a stranger passed")
				}
			},
			"evict": func(rt *rapid.T) {
				p.EvictIdle(rapid.IntRange(-1, 2).Draw(rt, "n"))
			},
			"invalidate": func(rt *rapid.T) {
				p.InvalidateTenant(rapid.SampledFrom(tenants).Draw(rt, "tenant"))
			},
			"corrupt": func(rt *rapid.T) {
				// A page's bytes change under its seal (a stray write, a
				// bad DIMM): the next lookup or sweep quarantines it.
				pg := rapid.IntRange(0, pages-1).Draw(rt, "page")
				w := p.pageBytes / 4
				p.u32[pg*w+rapid.IntRange(0, w-1).Draw(rt, "word")] ^= 0x40000000
			},
			"sweep": func(rt *rapid.T) {
				if err := p.VerifyStep(); err != nil {
					okViolation(rt, err)
				}
			},
			"tick": func(rt *rapid.T) {
				now += rapid.IntRange(0, 2).Draw(rt, "seconds")
				p.Expire(at())
			},
			"": func(rt *rapid.T) {
				if err := p.audit(); err != nil {
					rt.Fatal(err)
				}
				if c, st := p.Counts(), p.Stats(); c != (Counts{Pages: st.Pages, Free: st.Free, CacheIdle: st.CacheIdle, Cached: st.Cached}) {
					rt.Fatalf("counts %+v, a recount %+v", c, st)
				}
				for _, tn := range tenants {
					for n := 0; n <= pages+1; n += 2 {
						if got, want := p.AvailableFor(tn, n), availableForByRecount(p, tn, n); got != want {
							rt.Fatalf("AvailableFor(%s, %d) = %d, a recount says %d", tn, n, got, want)
						}
					}
				}
			},
		})
		for _, s := range live {
			_ = p.Release(s.o, s.refs)
		}
		p.Expire(at().Add(time.Hour))
		p.Expire(at().Add(2 * time.Hour))
		p.EvictIdle(-1)
		if err := p.audit(); err != nil {
			rt.Fatal(err)
		}
		if len(p.holding) != 0 {
			rt.Fatalf("%d tenants still counted holding pages in a whole pool", len(p.holding))
		}
	})
}

// okViolation fails on an error that is not a pool violation: a step
// on pages a stranger's release quarantined is refused, as it should be.
func okViolation(rt *rapid.T, err error) {
	var v *Violation
	if err != nil && !errors.As(err, &v) {
		rt.Fatal(err)
	}
}

// availableForByRecount is AvailableFor as it was before the counts: the
// pool share over a full recount of what each tenant holds, and every
// other scope's cache share computed by shareLocked.
func availableForByRecount(p *Pool, tenant string, n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	held := p.recountHeldLocked()
	w := p.cacheWeight(tenant)
	sum := w
	for t, h := range held {
		if t != tenant && h > 0 {
			sum += p.cacheWeight(t)
		}
	}
	if int64(held[tenant]+n) <= int64(len(p.pages))*w/sum {
		return p.nfree + p.cache.idle
	}
	room := p.cache.public.idle
	for t, s := range p.cache.scopes {
		b := s.idle
		if t != tenant {
			b = min(b, max(0, s.cached-p.shareLocked(t)))
		}
		room += b
	}
	return p.nfree + room
}

// An admission check allocates nothing (BenchmarkAvailableFor shows it
// does not grow with the pool): AvailableFor by the tenant over its share,
// the path that computes every scope's eviction budget.
func TestAvailableForAllocatesNothing(t *testing.T) {
	p := holdBenchPool(t, 1024)
	if a := testing.AllocsPerRun(100, func() { p.AvailableFor("flood", 4) }); a != 0 {
		t.Errorf("AvailableFor allocates %.0f times per call", a)
	}
}

// Another tenant's cache share, in the eviction budget, is its weight's
// part: b (weight 2) caching 7 of 12 pages beside a (weight 1) caching 1
// is within its share of 8, so a, over its pool share, may evict none of
// b's entries: only its own idle page. (Its count's part, 4, would give a
// 3 of b's.)
func TestAvailableForWeightsCacheShares(t *testing.T) {
	p := newPool(t, 12, func(c *Config) {
		c.CacheWeight = func(t string) int { return map[string]int{"a": 1, "b": 2}[t] }
	})
	cache := func(o Owner, n int) {
		refs, err := p.Reserve(o, n)
		if err != nil {
			t.Fatal(err)
		}
		for i, ref := range refs {
			if err := p.WritePage(o, ref, tg.PageSize, pageImage(o, ref.Gen, i, tg.PageSize)); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Seal(o, refs); err != nil {
			t.Fatal(err)
		}
		for i, ref := range refs {
			if ok, err := p.Insert(o, ref, BlockKey{byte(i), o.Tenant[0]}); !ok || err != nil {
				t.Fatalf("insert: %v %v", ok, err)
			}
		}
		if err := p.Release(o, refs); err != nil {
			t.Fatal(err)
		}
	}
	cache(owner("b", 1), 7)
	cache(owner("a", 2), 1)
	if _, err := p.Reserve(owner("a", 3), 3); err != nil {
		t.Fatal(err)
	}
	if got := p.AvailableFor("a", 1); got != 2 {
		t.Errorf("AvailableFor(a, 1) = %d, want 1 free + a's own idle page", got)
	}
	if _, err := p.Reserve(owner("a", 4), 3); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("a over its pool share evicted b's entries within b's weighted cache share: %v", err)
	}
	if st := p.Stats(); st.CacheIdle != 8 {
		t.Fatalf("%d idle cache pages left, want all 8", st.CacheIdle)
	}
}
