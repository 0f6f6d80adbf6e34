package engine

import (
	"slices"

	"sluice/internal/kv"
	"sluice/internal/sched"
)

// The KV quota's edge in the batch: the decisions are sched.Pages's (pure);
// this file builds its snapshot from the batch and carries them out.
//
//   - Admission into the batch (join), growth (growAll) and resumption
//     (resume) are growths: a tenant over its share while another tenant
//     waits does not grow; the newest of its sequences yields instead.
//   - When the pool is dry the victim is the tenant furthest over its
//     share (victim).
//   - A waiting tenant owed pages within its share reclaims them from the
//     tenant furthest over its own (reclaim).
//   - The oldest sequence (running or preempted) is exempt from all of it:
//     it may always grow or resume and is never another tenant's victim,
//     so it always progresses (and a request larger than its tenant's
//     share runs when it is the oldest).

// want is a request waiting outside the batch for pages (the colocated
// admission's, refused for room).
type want struct {
	tenant string
	weight int
	pages  int
}

// setWant records that owner's request waits for pages (its tenant then
// contends for the pool); called from the admission's goroutines.
func (s *batch) setWant(o kv.Owner, weight, pages int) {
	s.wantMu.Lock()
	if s.wanting == nil {
		s.wanting = map[kv.ID]want{}
	}
	s.wanting[o.ID] = want{tenant: o.Tenant, weight: weight, pages: pages}
	s.wantMu.Unlock()
}

// dropWant: owner's request no longer waits (it got its pages or left).
func (s *batch) dropWant(o kv.Owner) {
	s.wantMu.Lock()
	delete(s.wanting, o.ID)
	s.wantMu.Unlock()
}

// pages is the quota's snapshot of the pool: pages held by each tenant's
// running sequences, and what its waiting requests need (the first
// preempted sequence's rebuild, else its smallest waiting request).
//
// It runs a few times a step (growAll asks it for each sequence that
// crosses a page), so it allocates nothing once its scratch has grown:
// the snapshot's Holders are the batch's scratch (holdersBuf), valid
// until the next call; publishPages keeps a copy.
func (s *batch) pages() sched.Pages {
	p := sched.Pages{Pool: s.pool.CapacityTokens() / s.cfg.PageSize, Holders: s.holdersBuf[:0]}
	// Held counts pages of the pool, not page-table entries: a prefix-cache
	// page read by several of a tenant's sequences (a shared system
	// prompt) is one page of the pool, counted once for that tenant;
	// counted per sequence, the tenant would look several times over its
	// share and yield or be preempted while it holds less. The shared
	// candidates go into sharedBuf as (holder, page) and are counted
	// once each after a sort.
	shared := s.sharedBuf[:0]
	for _, q := range s.active {
		if q.emit == nil || s.isPreempted(q) || len(q.table) == 0 {
			continue
		}
		i := holderOf(&p, q.owner.Tenant, q.weight)
		// Only full prompt pages can be shared (the cache keys nothing
		// else); the pages after them are the sequence's own. The public
		// prefix's pages, first, are nobody's: the public scope has its
		// own budget, and counted per tenant they would put every tenant
		// that uses the prefix over its share by the same pages.
		n := min(len(q.table), q.promptTokens/s.cfg.PageSize)
		p.Holders[i].Held += len(q.table) - n
		for _, ref := range q.table[min(q.public, n):n] {
			shared = append(shared, uint64(i)<<32|uint64(ref.Page))
		}
	}
	slices.Sort(shared)
	for j, k := range shared {
		if j == 0 || k != shared[j-1] {
			p.Holders[k>>32].Held++
		}
	}
	s.sharedBuf = shared
	// (holderOf may grow p.Holders: its index is taken before the
	// slice is read.)
	for _, q := range s.preempted {
		i := holderOf(&p, q.owner.Tenant, q.weight)
		if h := &p.Holders[i]; h.Wants == 0 {
			h.Wants = kv.PagesFor(len(q.prompt)+1, s.cfg.PageSize)
		}
	}
	s.wantMu.Lock()
	for _, w := range s.wanting {
		i := holderOf(&p, w.tenant, w.weight)
		if h := &p.Holders[i]; h.Wants == 0 || w.pages < h.Wants {
			h.Wants = max(w.pages, 1)
		}
	}
	s.wantMu.Unlock()
	s.addIdle(&p)
	s.holdersBuf = p.Holders
	return p
}

// holderOf is the index of tenant's holder in p, added with weight when
// p has none.
func holderOf(p *sched.Pages, tenant string, weight int) int {
	for i := range p.Holders {
		if p.Holders[i].Tenant == tenant {
			return i
		}
	}
	p.Holders = append(p.Holders, sched.Holder{Tenant: tenant, Weight: weight})
	return len(p.Holders) - 1
}

// addIdle counts each tenant's idle prefix-cache entries in p: a tenant
// holding only cached pages contends for the pool, so that a tenant's
// share here is the pool's (kv's holdShareLocked counts every tenant
// holding pages, cached ones included): one idea of a share, not two
// (TestShareEngineAndPoolAgree).
func (s *batch) addIdle(p *sched.Pages) {
	raw := rawPool(s.pool)
	if raw == nil {
		return
	}
	s.idleBuf = raw.AppendIdle(s.idleBuf[:0])
	for _, c := range s.idleBuf {
		i := holderOf(p, c.Tenant, cacheWeight(s.cfg, c.Tenant))
		p.Holders[i].Cached += c.Pages
	}
}

// cacheWeight is tenant's weight in the pool's shares, as the pool has it
// (kv.Config.CacheWeight, from the same --api-keys weights).
func cacheWeight(cfg Config, tenant string) int {
	if cfg.CacheWeight != nil {
		if w := cfg.CacheWeight(tenant); w > 0 {
			return w
		}
	}
	return 1
}

// publishWaiting tells the pool which tenants wait for its pages (p's
// holders with Wants): contenders in the pool's share as in p's.
func (s *batch) publishWaiting(p sched.Pages) {
	raw := rawPool(s.pool)
	if raw == nil {
		return
	}
	s.waitBuf = s.waitBuf[:0]
	for _, h := range p.Holders {
		if h.Wants > 0 {
			s.waitBuf = append(s.waitBuf, h.Tenant)
		}
	}
	raw.SetWaiting(kv.WaitBatch, s.waitBuf)
}

// oldest is the sequence of earliest arrival, running or preempted,
// exempt from the quota (the batch's progress guarantee: a request larger
// than its tenant's share runs when it is the oldest); nil when none.
func (s *batch) oldest() *seq {
	var o *seq
	for _, qs := range [][]*seq{s.active, s.preempted} {
		for _, q := range qs {
			if q.emit == nil {
				continue
			}
			if o == nil || q.arrival < o.arrival {
				o = q
			}
		}
	}
	return o
}

// yieldJoined parks the sequences that just joined whose tenant is over
// its share while another tenant waits: their reservation was a growth
// the quota does not allow now (the admission reserved them before the
// batch could see who waits). They resume when their tenant may grow.
func (s *batch) yieldJoined(joined []*seq) {
	if len(joined) == 0 {
		return
	}
	oldest := s.oldest()
	freed := false
	for _, q := range slices.Backward(joined) {
		if q == oldest || !s.preemptible(q) || q.evict {
			continue
		}
		p := s.pages()
		if !p.Contended(q.owner.Tenant) || p.MayTake(q.owner.Tenant, 0) {
			continue
		}
		s.preempt(q)
		freed = true
	}
	if freed {
		s.dropParked()
		s.notifyFreed()
	}
}

// reclaim preempts, newest first, sequences of the tenant furthest over
// its share while a waiting tenant is owed pages within its own
// (sched.Pages.ReclaimBy). Without a real pool (no free-page count) it
// does nothing.
func (s *batch) reclaim() {
	raw := rawPool(s.pool)
	if raw == nil {
		return
	}
	oldest := s.oldest()
	freed := false
	// A waiter is owed what its reservation could not get: another
	// tenant's cached prefixes it may not evict are no room for it
	// (TestKVQuotaReclaimCountsWhatTheWaiterMayEvict).
	avail := func(h sched.Holder) int { return raw.AvailableFor(h.Tenant, h.Wants) }
	for range len(s.active) {
		t := s.pages().ReclaimBy(avail, func(t string) bool { return s.latestOf(t, oldest) != nil })
		if t == "" {
			break
		}
		s.preempt(s.latestOf(t, oldest))
		freed = true
	}
	if freed {
		s.dropParked()
		s.notifyFreed()
	}
}

// dropParked takes preempted and ended sequences out of the active list.
func (s *batch) dropParked() {
	live := s.active[:0]
	for _, q := range s.active {
		if q.emit != nil && !s.isPreempted(q) {
			live = append(live, q)
		}
	}
	clear(s.active[len(live):])
	s.active = live
}

func (s *batch) notifyFreed() {
	if s.freed != nil {
		s.freed()
	}
}

// countResumable publishes how many preempted sequences may take pages
// now: new requests wait behind those, not behind sequences the quota
// holds back.
func (s *batch) countResumable() {
	n := 0
	if len(s.preempted) > 0 {
		p, oldest := s.pages(), s.oldest()
		for _, q := range s.preempted {
			if q == oldest || p.MayTake(q.owner.Tenant, kv.PagesFor(len(q.prompt)+1, s.cfg.PageSize)) {
				n++
			}
		}
	}
	s.nResumable.Store(int64(n))
}

// publishPages stores the quota's snapshot for admission (withinShare):
// a copy (pages' Holders are scratch), made only when the snapshot
// changed, so a step that moved no page allocates nothing.
func (s *batch) publishPages() {
	p := s.pages()
	if old := s.held.Load(); old == nil || !samePages(*old, p) {
		c := sched.Pages{Pool: p.Pool, Holders: slices.Clone(p.Holders)}
		s.held.Store(&c)
	}
	s.publishWaiting(p)
}

// samePages: a and b hold the same claims, in any order of holders (the
// waiting requests' tenants come from a map).
func samePages(a, b sched.Pages) bool {
	if a.Pool != b.Pool || len(a.Holders) != len(b.Holders) {
		return false
	}
	for _, h := range a.Holders {
		if !slices.Contains(b.Holders, h) {
			return false
		}
	}
	return true
}

// overShare reports, from the last cycle's snapshot, whether tenant taking
// n more pages would hold more than its share while another tenant holds
// pages or waits for them (waiting: the tenants with queued requests, each
// counted with weight 1 when it holds nothing yet).
func (s *batch) overShare(tenant string, n int, waiting []string) bool {
	p := s.held.Load()
	if p == nil {
		return false
	}
	q := s.withTenant(p, tenant)
	for _, w := range waiting {
		if w == tenant {
			continue
		}
		i := slices.IndexFunc(q.Holders, func(h sched.Holder) bool { return h.Tenant == w })
		if i < 0 {
			q.Holders = append(q.Holders, sched.Holder{Tenant: w, Weight: cacheWeight(s.cfg, w), Wants: 1})
		} else if q.Holders[i].Wants == 0 {
			q.Holders[i].Wants = 1
		}
	}
	return q.OverShare(tenant, n)
}

// withTenant is a copy of p with tenant among its holders, at its weight:
// a tenant the snapshot does not name would count with weight 1, and its
// share would not be the pool's (one idea of a share).
func (s *batch) withTenant(p *sched.Pages, tenant string) sched.Pages {
	q := sched.Pages{Pool: p.Pool, Holders: slices.Clone(p.Holders)}
	if !slices.ContainsFunc(q.Holders, func(h sched.Holder) bool { return h.Tenant == tenant }) {
		q.Holders = append(q.Holders, sched.Holder{Tenant: tenant, Weight: cacheWeight(s.cfg, tenant)})
	}
	return q
}

// withinShare reports, from the last cycle's snapshot, whether tenant
// taking n more pages stays within its share of the pool while another
// tenant holds pages: such a reservation skips the free-page watermark
// (which keeps room for the running sequences to grow, and would make a
// tenant under its share wait for a flooding one's sequences to end).
func (s *batch) withinShare(tenant string, n int) bool {
	p := s.held.Load()
	if p == nil {
		return false
	}
	q := s.withTenant(p, tenant)
	return q.WithinShare(tenant, n)
}
