package kv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"sluice/internal/sched"
)

// One idea of a tenant's share (docs/isolation.md, "KV quotas"): the
// engine's KV quota (sched.Pages over the running sequences' pages, the
// idle cached ones and the waiting requests) and the pool's share check
// (holdShareLocked, over the pages a tenant holds in use and cached, and
// the tenants the engine names as waiting) must give every tenant the same
// share, and the pool's count must be the engine's running pages plus its
// idle cached ones. This test drives a real pool the way the engine's
// batch does, with random admissions, growth, ends (the prompt's pages
// cached), preemptions, reclaims and evictions for three weighted
// tenants, a flooding unique prompts and b, c repeating their own, and
// checks after every step:
//
//	(a) while a tenant waits for pages within its share and they are not
//	    there for it, no other tenant's running pages exceed its share once
//	    the step's reclaim is done;
//	(b) the victim of a dry pool is over its share whenever any tenant is;
//	(c) a's reservations evict another tenant's cached page only when a
//	    has no idle entry left or that tenant caches more pages for its
//	    weight than a;
//	(d) engine and pool agree: the same share for every tenant, the pool's
//	    count is running + idle cached, so a tenant within its share by the
//	    pool's count is within it by the engine's.
func TestShareEngineAndPoolAgree(t *testing.T) {
	weights := map[string]int{"a": 1, "b": 2, "c": 1}
	seeds := uint64(150)
	if testing.Short() {
		seeds = 20 // the race run (-short): ~10x slower per seed
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := newShareSim(t, seed, weights)
			for step := range 250 {
				s.step(step)
			}
			if err := s.p.Audit(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

type simSeq struct {
	o     Owner
	table []PageRef // cache hits, then the sequence's own pages
	// shared is how many of table's first refs are cache shares (hits or
	// its own pages it inserted), not pages it owns outright.
	pages int // pages it needs to start again (its table's length)
}

type simWait struct {
	tenant string
	pages  int
	seed   int32
}

type shareSim struct {
	t       *testing.T
	rng     *rand.Rand
	p       *Pool
	weights map[string]int
	tenants []string
	running []*simSeq // oldest first
	waiting []simWait // oldest first
	nextID  byte
	nextSd  int32
}

func newShareSim(t *testing.T, seed uint64, weights map[string]int) *shareSim {
	s := &shareSim{t: t, rng: rand.New(rand.NewPCG(seed, 28)), weights: weights, nextSd: 1000}
	s.p = newPool(t, 24, func(c *Config) { c.CacheWeight = func(x string) int { return weights[x] } })
	for x := range weights {
		s.tenants = append(s.tenants, x)
	}
	slices.Sort(s.tenants)
	return s
}

// snapshot is the engine's sched.Pages of the pool, built as
// engine/quota.go's batch.pages does: each tenant's running pages (a
// cached page read by several of its sequences once), its smallest
// waiting request, its idle cached pages from the pool.
func (s *shareSim) snapshot() sched.Pages {
	p := sched.Pages{Pool: s.p.Pages()}
	at := func(x string) *sched.Holder {
		for i := range p.Holders {
			if p.Holders[i].Tenant == x {
				return &p.Holders[i]
			}
		}
		p.Holders = append(p.Holders, sched.Holder{Tenant: x, Weight: s.weights[x]})
		return &p.Holders[len(p.Holders)-1]
	}
	for _, x := range s.tenants {
		at(x) // every tenant at its weight (the engine's withTenant)
	}
	seen := map[[2]uint32]bool{}
	for _, q := range s.running {
		h := at(q.o.Tenant)
		id := s.p.cache.tenants[q.o.Tenant]
		for _, r := range q.table {
			k := [2]uint32{id, r.Page}
			if !seen[k] {
				seen[k] = true
				h.Held++
			}
		}
	}
	for _, w := range s.waiting {
		if h := at(w.tenant); h.Wants == 0 || w.pages < h.Wants {
			h.Wants = w.pages
		}
	}
	for _, c := range s.p.AppendIdle(nil) {
		at(c.Tenant).Cached += c.Pages
	}
	return p
}

// publish names the waiting tenants to the pool, as the batch's
// publishWaiting does every cycle.
func (s *shareSim) publish() {
	var ts []string
	for _, w := range s.waiting {
		ts = append(ts, w.tenant)
	}
	s.p.SetWaiting(WaitBatch, ts)
}

func (s *shareSim) held(p sched.Pages, x string) sched.Holder {
	for _, h := range p.Holders {
		if h.Tenant == x {
			return h
		}
	}
	return sched.Holder{Tenant: x, Weight: s.weights[x]}
}

func (s *shareSim) step(step int) {
	t := s.t
	s.publish()
	switch r := s.rng.IntN(100); {
	case r < 35:
		x := s.tenants[s.rng.IntN(len(s.tenants))]
		seed := int32(s.rng.IntN(2)) // b and c repeat two prompts each
		if x == "a" {
			s.nextSd++
			seed = s.nextSd // a floods unique prompts
		}
		s.admit(simWait{tenant: x, pages: 1 + s.rng.IntN(4), seed: seed}, false)
	case r < 60 && len(s.running) > 0:
		s.grow(s.running[s.rng.IntN(len(s.running))])
	case r < 80 && len(s.running) > 0:
		i := s.rng.IntN(len(s.running))
		q := s.running[i]
		s.running = slices.Delete(s.running, i, i+1)
		if err := s.p.Release(q.o, q.table); err != nil {
			t.Fatal(err)
		}
	case r < 85 && len(s.running) > 0:
		s.preempt(s.running[s.rng.IntN(len(s.running))])
	case r < 88:
		s.p.EvictIdle(1)
	default:
		s.reclaim()
		s.resume()
	}
	s.publish()
	s.checkAgree(step)
}

// admit is the colocated admission: refused over its share while others
// hold or wait (only its own tenant waits then, not counted), else a
// reservation that waits for room when the pool has none for it; a
// tenant over its share that joins while another waits yields at once.
func (s *shareSim) admit(w simWait, resumed bool) bool {
	t := s.t
	x := w.tenant
	s.nextID++
	o := Owner{Tenant: x, ID: ID{s.nextID, byte(s.nextSd), byte(s.nextSd >> 8)}}
	toks := prompt(w.seed+int32(100*len(x)), w.pages)
	keys := PrefixKeys(testFP, saltOf(x), tg.PageSize, toks)
	hits, err := s.p.Lookup(o, keys)
	if err != nil {
		t.Fatal(err)
	}
	n := w.pages - len(hits)
	snap := s.snapshot()
	if !resumed && snap.OverShare(x, n) {
		s.p.Release(o, hits)
		return false
	}
	before := s.cachedPerTenant()
	idleA := s.idleOf("a")
	refs, err := s.p.Extend(o, hits, n)
	if x == "a" {
		s.checkFloodEvictsOwn(before, idleA)
	}
	if err != nil {
		if !errors.Is(err, ErrNoCapacity) {
			t.Fatal(err)
		}
		s.p.Release(o, hits)
		if !resumed {
			s.waiting = append(s.waiting, w)
		}
		return false
	}
	// The prompt's pages are cached from its end, read by the sequence.
	fill(t, s.p.View(o, refs), refs, len(hits)*tg.PageSize, w.pages*tg.PageSize)
	if err := s.p.Seal(o, refs[len(hits):]); err != nil {
		t.Fatal(err)
	}
	for i := len(hits); i < len(refs); i++ {
		if _, err := s.p.Insert(o, refs[i], keys[i]); err != nil {
			t.Fatal(err)
		}
	}
	q := &simSeq{o: o, table: refs, pages: w.pages}
	s.running = append(s.running, q)
	if p := s.snapshot(); p.Contended(x) && !p.MayTake(x, 0) {
		s.preempt(q) // yieldJoined
	}
	return true
}

// grow adds a page to q: its own newest yields instead while its tenant
// is over its share and another waits; a dry pool preempts the victim.
func (s *shareSim) grow(q *simSeq) {
	t := s.t
	x := q.o.Tenant
	if p := s.snapshot(); p.Contended(x) && !p.MayTake(x, 1) {
		s.preempt(s.newest(x))
		return
	}
	before := s.cachedPerTenant()
	idleA := s.idleOf("a")
	refs, err := s.p.Extend(q.o, q.table, 1)
	if x == "a" {
		s.checkFloodEvictsOwn(before, idleA)
	}
	if err == nil {
		q.table, q.pages = refs, q.pages+1
		return
	}
	if !errors.Is(err, ErrNoCapacity) {
		t.Fatal(err)
	}
	p := s.snapshot()
	v := p.Victim(func(x string) bool { return s.newest(x) != nil })
	// (b) the victim is over its share if anyone is.
	anyOver := false
	for _, h := range p.Holders {
		anyOver = anyOver || h.Held > p.Share(h.Tenant)
	}
	if vh := s.held(p, v); anyOver && vh.Held <= p.Share(v) {
		t.Fatalf("victim %s holds %d of its share %d while a tenant is over its own: %+v", v, vh.Held, p.Share(v), p)
	}
	s.preempt(s.newest(v))
}

func (s *shareSim) newest(x string) *simSeq {
	for _, q := range slices.Backward(s.running) {
		if q.o.Tenant == x {
			return q
		}
	}
	return nil
}

// preempt releases q's pages; it waits to start again.
func (s *shareSim) preempt(q *simSeq) {
	i := slices.Index(s.running, q)
	s.running = slices.Delete(s.running, i, i+1)
	if err := s.p.Release(q.o, q.table); err != nil {
		s.t.Fatal(err)
	}
	s.waiting = append(s.waiting, simWait{tenant: q.o.Tenant, pages: q.pages, seed: int32(1 << 20)})
}

// reclaim is the batch's: preempt, newest first, the tenant furthest over
// its share while a waiting tenant is owed pages within its own; then (a).
func (s *shareSim) reclaim() {
	avail := func(h sched.Holder) int { return s.p.AvailableFor(h.Tenant, h.Wants) }
	for {
		s.publish()
		x := s.snapshot().ReclaimBy(avail, func(x string) bool { return s.newest(x) != nil })
		if x == "" {
			break
		}
		s.preempt(s.newest(x))
	}
	s.publish()
	p := s.snapshot()
	for _, u := range p.Holders {
		if u.Wants == 0 || u.Held+u.Wants > p.Share(u.Tenant) || s.p.AvailableFor(u.Tenant, u.Wants) >= u.Wants {
			continue
		}
		for _, h := range p.Holders {
			if h.Tenant != u.Tenant && h.Held > p.Share(h.Tenant) {
				s.t.Fatalf("(a) %s waits for %d pages within its share %d, %s runs %d pages over its share %d: %+v",
					u.Tenant, u.Wants, p.Share(u.Tenant), h.Tenant, h.Held, p.Share(h.Tenant), p)
			}
		}
	}
}

// resume admits the waiting requests, oldest first, as room allows.
func (s *shareSim) resume() {
	ws := s.waiting
	s.waiting = nil
	for i, w := range ws {
		s.waiting = append(s.waiting, ws[i+1:]...)
		s.publish()
		ok := s.admit(w, true)
		s.waiting = s.waiting[:len(s.waiting)-len(ws[i+1:])]
		if !ok {
			s.waiting = append(s.waiting, w)
		}
	}
}

func (s *shareSim) cachedPerTenant() map[string]int {
	m := map[string]int{}
	for x, sc := range s.p.cache.scopes {
		m[x] = sc.cached
	}
	return m
}

func (s *shareSim) idleOf(x string) int {
	if sc := s.p.cache.scopes[x]; sc != nil {
		return sc.idle
	}
	return 0
}

// checkFloodEvictsOwn is (c) for one of a's reservations: when another
// tenant x's last page went, a had idle entries (it still has some after)
// and x cached more pages for its weight than a (a tie takes a's own
// first). a's count then was at least its count after, so a violation
// shows as x having had, before its last eviction, no more per weight
// than a has after, while a still has an idle entry.
func (s *shareSim) checkFloodEvictsOwn(before map[string]int, idleA int) {
	after := s.cachedPerTenant()
	if idleA == 0 || s.idleOf("a") == 0 {
		return
	}
	for x, n := range before {
		if x == "a" || after[x] >= n {
			continue
		}
		if (after[x]+1)*s.weights["a"] <= after["a"]*s.weights[x] {
			s.t.Fatalf("(c) a's reservation evicted %d of %s's %d cached pages while a had %d idle and %d cached (%d after)",
				n-after[x], x, n, idleA, before["a"], after["a"])
		}
	}
}

// checkAgree is (d).
func (s *shareSim) checkAgree(step int) {
	p := s.snapshot()
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	for _, x := range s.tenants {
		h := s.held(p, x)
		held, share := s.p.shareOfLocked(x)
		if share != p.Share(x) {
			s.t.Fatalf("step %d: tenant %s's share is %d in the engine's quota, %d in the pool's check: %+v, waiting %v",
				step, x, p.Share(x), share, p, s.p.waiting)
		}
		if held != h.Held+h.Cached {
			s.t.Fatalf("step %d: tenant %s holds %d pages by the pool's count, %d running + %d idle cached by the engine's",
				step, x, held, h.Held, h.Cached)
		}
		for n := range 4 {
			if s.p.holdShareLocked(x, n) && h.Held+n > p.Share(x) {
				s.t.Fatalf("step %d: tenant %s taking %d is within its share by the pool's count, over by the engine's", step, x, n)
			}
		}
	}
}
