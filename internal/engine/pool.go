package engine

import (
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/model"
)

// pagePool is the KV pool as the workers use it. The real pool
// (internal/kv) is adapted to it; keeping the engine behind this small
// interface also lets the incident replay (internal/incident) watch what
// attention reads.
type pagePool interface {
	// handoff.Pool: Reserve, WritePage, MarkWritten, PageData, Digest,
	// Release, Quarantine, DrainAck, Expire.
	handoff.Pool
	// Extend returns the whole new table: table followed by n new pages.
	Extend(o kv.Owner, table []kv.PageRef, n int) ([]kv.PageRef, error)
	// View is the owner-checking KV view the model reads through (I3, I4).
	View(o kv.Owner, table []kv.PageRef) model.KV
	CheckDrained() error
	CapacityTokens() int
}

// PagePool is pagePool for a driver outside the package (internal/sim
// wraps the pool to watch every release and grant; internal/incident to
// watch what attention reads).
type PagePool = pagePool

// KVPool adapts a kv pool to a worker's PagePool.
func KVPool(p *kv.Pool) PagePool { return kvPool{p} }

// kvPool adapts *kv.Pool: its View returns the concrete *kv.View.
type kvPool struct{ *kv.Pool }

func (p kvPool) View(o kv.Owner, table []kv.PageRef) model.KV { return p.Pool.View(o, table) }

// Raw is the real pool, for a wrapper's own Raw (see rawPool).
func (p kvPool) Raw() *kv.Pool { return p.Pool }

// rawPool is the real pool behind p, for metrics and drain checks. A
// wrapper from outside the package names it with a Raw method.
func rawPool(p pagePool) *kv.Pool {
	if q, ok := p.(interface{ Raw() *kv.Pool }); ok {
		return q.Raw()
	}
	return nil
}

// expireLeases frees, every quarter lease, the quarantined pages of p whose
// lease has passed, until quit closes; freed runs when some came back. The
// decode worker's receiver does this on its own tick; the prefill worker
// and the colocated engine have no receiver, and without this a page
// quarantined in their pools (a seal mismatch on a cache hit, a refused
// foreign read) would never be free again: each one a page less for every
// tenant. Time enters here, at the edge (the pool takes now as an input).
func expireLeases(p pagePool, lease time.Duration, quit <-chan struct{}, freed func()) {
	t := time.NewTicker(max(lease/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case now := <-t.C:
			if p.Expire(now) > 0 && freed != nil {
				freed()
			}
		}
	}
}
