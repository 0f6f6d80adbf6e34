package engine

import (
	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/model"
)

// pagePool is the KV pool as the workers use it. The real pool
// (internal/kv) is adapted to it; keeping the engine behind this small
// interface also lets the incident demo watch what attention reads.
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
// wraps the pool to watch every release and grant).
type PagePool = pagePool

// KVPool adapts a kv pool to a worker's PagePool.
func KVPool(p *kv.Pool) PagePool { return kvPool{p} }

// kvPool adapts *kv.Pool: its View returns the concrete *kv.View.
type kvPool struct{ *kv.Pool }

func (p kvPool) View(o kv.Owner, table []kv.PageRef) model.KV { return p.Pool.View(o, table) }

// rawPool is the real pool behind p, for metrics and drain checks.
func rawPool(p pagePool) *kv.Pool {
	switch q := p.(type) {
	case kvPool:
		return q.Pool
	case interface{ raw() *kv.Pool }:
		return q.raw()
	}
	return nil
}
