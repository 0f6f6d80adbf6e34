package engine

import (
	"context"

	"sluice/internal/handoff"
)

// Load implements handoff.Loader: the decode pool's free and total pages
// and the handoffs the worker holds (reserved, filling or decoding). It
// reads counters only, so a router may poll it with its health probe.
func (w *DecodeWorker) Load(context.Context) (*handoff.Load, error) {
	ps := w.Pool().Stats()
	w.mu.Lock()
	n := len(w.handoffs)
	w.mu.Unlock()
	return &handoff.Load{FreePages: ps.Free, TotalPages: ps.Pages, Running: n}, nil
}

var _ handoff.Loader = (*DecodeWorker)(nil)
