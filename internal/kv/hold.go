package kv

import "fmt"

// What each tenant holds of the pool, counted as pages change, not
// recounted: the tenant-aware admission checks (AvailableFor, the pool
// share of holdShareLocked) run on every colocated admission decision,
// and a recount is a pass over every page under the pool lock (a
// 70B-class pool has 100k+ pages). With the counts kept here a check
// costs a pass over the tenants holding pages, and allocates nothing.
//
// A page counts for its owner's tenant (page.holder)
// while it is in use (neither free, quarantined nor a cache entry) or a
// private cache entry (read or idle, quarantined or not); the public
// scope's pages are nobody's. Every change of a page's state, cache
// membership or tenant happens under Pool.mu and moves the counts with it:
// a reservation adds its pages (reserveLocked), a state change into or out
// of use moves a page that is not a cache entry (setStateLocked), and the
// cache's changes sit between holdLocked(pg, -1) and holdLocked(pg, +1)
// (insert, uncacheLocked). audit compares the counts with
// recountHeldLocked's full recount (TestHoldCountsEqualRecount).

// tenantHold is one interned tenant's count.
type tenantHold struct {
	name string
	held int
	// at is the tenant's index in Pool.holding while held > 0, else -1.
	at int
}

// holdOfLocked is the tenant a page counts for and whether it counts.
func (p *Pool) holdOfLocked(pg uint32) (uint32, bool) {
	id := p.pages[pg].holder
	if id == 0 {
		return 0, false
	}
	if cm := &p.cache.meta[pg]; cm.cached {
		return id, !cm.public
	}
	return id, inUseState(tagState(p.pages[pg].tag.Load()))
}

// inUseState: a page in state s that is not a cache entry counts for its
// tenant.
func inUseState(s State) bool { return s != Free && s != Quarantined }

// holdLocked adds d to the count of the tenant page pg counts for, if it
// counts: called with -1 before a change to the page and +1 after it.
func (p *Pool) holdLocked(pg uint32, d int) {
	if id, ok := p.holdOfLocked(pg); ok {
		p.addHeldLocked(id, d)
	}
}

// addHeldLocked adds d to the count of the tenant of interned id id.
func (p *Pool) addHeldLocked(id uint32, d int) {
	h := &p.holds[id]
	was := h.held
	h.held += d
	switch {
	case h.held < 0:
		panic(fmt.Sprintf("kv: tenant %d holds %d pages (accounting)", id, h.held))
	case was == 0 && h.held > 0:
		h.at = len(p.holding)
		p.holding = append(p.holding, id)
	case was > 0 && h.held == 0:
		last := p.holding[len(p.holding)-1]
		p.holding[h.at] = last
		p.holds[last].at = h.at
		p.holding = p.holding[:len(p.holding)-1]
		h.at = -1
	}
}

// recountHeldLocked counts what each tenant holds by a pass over every
// page, the way the counts define it: pages in use by their owner's
// tenant plus each tenant's private cache entries. Only audit (and so the
// tests) call it.
func (p *Pool) recountHeldLocked() map[string]int {
	held := map[string]int{}
	for pg := range p.pages {
		m := &p.pages[pg]
		if st := tagState(m.tag.Load()); st != Free && st != Quarantined && !p.cache.meta[pg].cached {
			held[m.owner.Tenant]++
		}
	}
	for t, s := range p.cache.scopes {
		if s.cached > 0 {
			held[t] += s.cached
		}
	}
	return held
}

// auditHoldsLocked checks the incremental counts against a recount.
func (p *Pool) auditHoldsLocked() error {
	want := p.recountHeldLocked()
	bad := func(format string, args ...any) error {
		return &Error{Code: CodeCorrupt, Msg: "tenant page counts: " + fmt.Sprintf(format, args...)}
	}
	n := 0
	for id := 1; id < len(p.holds); id++ {
		h := &p.holds[id]
		if h.held != want[h.name] {
			return bad("a tenant is counted holding %d pages, a recount finds %d", h.held, want[h.name])
		}
		if h.held > 0 {
			n++
			if h.at < 0 || h.at >= len(p.holding) || p.holding[h.at] != uint32(id) {
				return bad("a tenant holding %d pages is not listed as holding", h.held)
			}
		} else if h.at != -1 {
			return bad("a tenant holding nothing is listed as holding")
		}
		delete(want, h.name)
	}
	for _, v := range want {
		if v != 0 {
			return bad("pages held by a tenant that was never counted")
		}
	}
	if n != len(p.holding) {
		return bad("%d tenants listed as holding, %d hold pages", len(p.holding), n)
	}
	return nil
}
