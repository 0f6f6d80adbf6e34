package engine

import (
	"context"

	"sluice/internal/handoff"
)

// Load implements handoff.Loader: the decode pool's free and total pages
// and the handoffs the worker holds (reserved, filling or decoding). It
// reads counters only, so a router may poll it with its health probe.
// Idle prefix-cache pages count as free: a reservation evicts them when it
// needs them, so a worker whose cache holds many prefixes is not thereby
// loaded (and prefix affinity is not fought by the free-pages scorer).
func (w *DecodeWorker) Load(context.Context) (*handoff.Load, error) {
	ps := w.Pool().Counts()
	w.mu.Lock()
	n := len(w.handoffs)
	w.mu.Unlock()
	return &handoff.Load{FreePages: ps.Free + ps.CacheIdle, TotalPages: ps.Pages, Running: n, CachedPages: ps.Cached, Context: w.Context()}, nil
}

// Load implements handoff.Loader for a prefill worker: its pool and the
// prompts it is prefilling or waiting to prefill (every router's), which
// the router's prefill-queue scorer adds to its own count.
func (w *PrefillWorker) Load(context.Context) (*handoff.Load, error) {
	ps := w.Pool().Counts()
	return &handoff.Load{FreePages: ps.Free, TotalPages: ps.Pages, Running: int(w.running.Load()), Context: w.ctx}, nil
}

var (
	_ handoff.Loader = (*DecodeWorker)(nil)
	_ handoff.Loader = (*PrefillWorker)(nil)
)
