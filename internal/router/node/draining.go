package node

import (
	"context"
	"sync/atomic"

	"sluice/internal/handoff"
)

// DrainingDecode is a decode worker's service as its handoff listener
// serves it. Once Draining is set (SIGTERM), a new Reserve is refused with
// handoff.ErrDraining and so is the load report: a router retries the
// request on another decode worker at once (nothing was reserved here)
// and stops picking this one at its next probe, well before its DNS or
// workers file drops it; the reservations already made go on (writes,
// commit, stream, abort), so the drain ends when they finish, not when
// the routers notice.
type DrainingDecode struct {
	handoff.Decode
	Draining *atomic.Bool
}

// Reserve implements handoff.Decode.
func (d DrainingDecode) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	if d.Draining.Load() {
		return nil, handoff.ErrDraining
	}
	return d.Decode.Reserve(ctx, r)
}

// Load implements handoff.Loader: the worker's report, or ErrDraining.
func (d DrainingDecode) Load(ctx context.Context) (*handoff.Load, error) {
	if d.Draining.Load() {
		return nil, handoff.ErrDraining
	}
	l, ok := d.Decode.(handoff.Loader)
	if !ok {
		return nil, handoff.ErrState.With("this worker does not report its load")
	}
	return l.Load(ctx)
}

var (
	_ handoff.Decode = DrainingDecode{}
	_ handoff.Loader = DrainingDecode{}
)
