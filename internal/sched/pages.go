package sched

// KV quotas: the share of a pool's pages a tenant's running sequences may
// hold while other tenants wait, and whom a preemption takes from. Like
// Core it is pure: the engine's batch builds a Pages snapshot (pages held
// per tenant, pages its waiting requests need) before each decision and
// carries out what the functions say; the simulator drives the same batch.
//
// The rules (docs/isolation.md, "KV quotas"):
//
//   - A contender is a tenant that holds pages of the pool (its running
//     sequences' or idle cached ones) or waits for some. A contender of weight w among contenders of total weight W has
//     a share of floor(Pool * w / W) pages.
//   - Work-conserving: a tenant may take any free page while no other
//     tenant waits. When another tenant waits for pages within its share,
//     it may take pages only up to its share (MayTake); beyond it, its own
//     latest sequence yields. (A request larger than its tenant's share
//     caps nobody: the cap would never give it room.)
//   - When the pool is dry, the preemption victim is a sequence of the
//     tenant furthest over its share (the largest Held/Weight, Victim), so
//     a tenant within its share is never preempted while another is over.
//   - A waiting tenant whose request fits within its share but not the free
//     pages reclaims them: the tenant furthest over its share is preempted
//     until the request fits or nobody is over (Reclaim).
//
// The bound this gives, the queue's extended to pages: while tenant B
// waits for r pages with Held_B + r <= Share_B, every step either admits
// B's request or preempts a sequence of a tenant over its share, and no
// tenant over its share grows; so B waits at most for the preemptions
// that bring the others down to their shares (at most one sequence each
// per step), never for their sequences to finish. The engine exempts one
// sequence from all of this (the oldest running one, which may always
// grow and is never another tenant's victim), so that the oldest sequence
// always makes progress and nothing livelocks; a tenant may exceed its
// share by that one sequence's growth.

// Holder is one tenant's claim on a pool now.
type Holder struct {
	Tenant string
	Weight int // >= 1; 0 means 1
	// Held is the pages its running sequences hold.
	Held int
	// Wants is the pages its waiting requests (queued, preempted) need to
	// start, the first of them; 0 when nothing of it waits.
	Wants int
	// Cached is its idle prefix-cache entries in the pool
	// (kv.Pool.AppendIdle): pages it holds that no running sequence
	// reads. They make it a contender (its share is counted like the
	// pool's, kv's holdShareLocked, so the two agree on every tenant's
	// share) but not a holder of running pages: the quota caps and
	// preempts running sequences only, and the cache gives its idle
	// pages back by eviction.
	Cached int
}

func (h Holder) weight() int { return max(h.Weight, 1) }

// Pages is a snapshot of one pool's claims: the quota's decisions are
// functions of it alone.
type Pages struct {
	Pool    int // pages in the pool
	Holders []Holder
}

func (p Pages) find(tenant string) int {
	for i, h := range p.Holders {
		if h.Tenant == tenant {
			return i
		}
	}
	return -1
}

// contends: h holds pages of the pool (running or cached) or waits.
func (h Holder) contends() bool { return h.Held > 0 || h.Wants > 0 || h.Cached > 0 }

// contenders is the total weight of the tenants holding or waiting.
func (p Pages) contenders() int {
	w := 0
	for _, h := range p.Holders {
		if h.contends() {
			w += h.weight()
		}
	}
	return w
}

// Share is tenant's share of the pool's pages among the contenders (the
// tenant counted as one even when it holds and wants nothing yet).
func (p Pages) Share(tenant string) int {
	i := p.find(tenant)
	w, total := 1, p.contenders()
	if i >= 0 {
		w = p.Holders[i].weight()
		if !p.Holders[i].contends() {
			total += w
		}
	} else {
		total += w
	}
	return p.Pool * w / total
}

// Contended reports whether a tenant other than tenant waits for pages
// within its share (Held + Wants <= Share). A request larger than what
// its tenant's share leaves it would never be given room by the cap: it
// caps nobody (it waits at the queue's head instead, where nothing
// overtakes it, and gets its pages as other requests end).
func (p Pages) Contended(tenant string) bool {
	for _, h := range p.Holders {
		if h.Tenant != tenant && h.Wants > 0 && h.Held+h.Wants <= p.Share(h.Tenant) {
			return true
		}
	}
	return false
}

// MayTake reports whether tenant may take n more pages: always while no
// other tenant waits (work-conserving), else only within its share.
func (p Pages) MayTake(tenant string, n int) bool {
	if !p.Contended(tenant) {
		return true
	}
	held := 0
	if i := p.find(tenant); i >= 0 {
		held = p.Holders[i].Held
	}
	return held+n <= p.Share(tenant)
}

// over reports whether a is further over its share than b: Held/Weight
// compared exactly; ties go to the larger holding, then the smaller name,
// so the choice is deterministic.
func over(a, b Holder) bool {
	x, y := a.Held*b.weight(), b.Held*a.weight()
	if x != y {
		return x > y
	}
	if a.Held != b.Held {
		return a.Held > b.Held
	}
	return a.Tenant < b.Tenant
}

// Victim is the tenant to preempt from when the pool is dry: among the
// tenants holding pages with a sequence that may be preempted (ok), the
// one furthest over its share. "" when there is none.
func (p Pages) Victim(ok func(tenant string) bool) string {
	best := -1
	for i, h := range p.Holders {
		if h.Held == 0 || !ok(h.Tenant) {
			continue
		}
		if best < 0 || over(h, p.Holders[best]) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return p.Holders[best].Tenant
}

// Reclaim is the tenant to preempt from so that a waiting tenant gets its
// share: when some tenant waits for Wants pages that fit within its share
// (Held + Wants <= Share) but not in the free pages, the tenant furthest
// over its share among those with a preemptible sequence (ok). "" when no
// waiting tenant is owed pages or nobody is over its share.
func (p Pages) Reclaim(free int, ok func(tenant string) bool) string {
	return p.ReclaimBy(func(Holder) int { return free }, ok)
}

// ReclaimBy is Reclaim where what a waiting tenant could have now depends
// on the tenant: free(h) is what h's request of h.Wants pages could get
// (the free pages and the idle cache entries its reservation may evict,
// kv.Pool.AvailableFor). Counted as one number for everyone, another
// tenant's cached prefixes it may not evict looked like room, and it was
// owed nothing while the tenant over its share kept the pages.
func (p Pages) ReclaimBy(free func(h Holder) int, ok func(tenant string) bool) string {
	owed := false
	for _, h := range p.Holders {
		if h.Wants > 0 && h.Held+h.Wants <= p.Share(h.Tenant) && h.Wants > free(h) {
			owed = true
			break
		}
	}
	if !owed {
		return ""
	}
	best := -1
	for i, h := range p.Holders {
		if h.Held <= p.Share(h.Tenant) || !ok(h.Tenant) {
			continue
		}
		if best < 0 || over(h, p.Holders[best]) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return p.Holders[best].Tenant
}

// OverShare reports whether tenant, taking n more pages, would hold more
// than its share while another tenant holds pages or waits for some: the
// admission's refusal that holds back only this tenant (Core's
// EvOverShare). A tenant holding nothing is never over: its first request
// may always start (one larger than its share runs when it is the
// oldest).
func (p Pages) OverShare(tenant string, n int) bool {
	held, others := 0, false
	for _, h := range p.Holders {
		if h.Tenant == tenant {
			held = h.Held
		} else if h.Held > 0 || h.Wants > 0 {
			others = true
		}
	}
	return others && held > 0 && held+n > p.Share(tenant)
}

// WithinShare reports whether tenant taking n more pages stays within its
// share while another tenant holds pages: such a reservation skips the
// free-page watermark (which keeps room for the running sequences to
// grow, and would make a tenant under its share wait for an over-share
// tenant's sequences to end).
func (p Pages) WithinShare(tenant string, n int) bool {
	held, others := 0, false
	for _, h := range p.Holders {
		if h.Tenant == tenant {
			held = h.Held
		} else if h.Held > 0 {
			others = true
		}
	}
	return others && held+n <= p.Share(tenant)
}
