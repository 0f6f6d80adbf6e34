// Package inproc carries the handoff services by direct calls inside one
// process. Every message is deep-copied on the way in and out, so the two
// sides never share a byte: a prefill pool's page can be released and
// scrubbed the moment Write returns without touching the decode pool, as
// over a real wire.
package inproc

import (
	"context"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// Decode returns d behind copying calls. Each method returns exactly when
// d's does, so its contract (applied, verified, ...) is d's.
func Decode(d handoff.Decode) handoff.Decode { return decode{d} }

// Prefill returns p behind copying calls.
func Prefill(p handoff.Prefill) handoff.Prefill { return prefill{p} }

type decode struct{ d handoff.Decode }

func (c decode) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	cp := *r
	res, err := c.d.Reserve(ctx, &cp)
	if res == nil {
		return nil, err
	}
	return CopyReservation(res), err
}

func (c decode) Write(ctx context.Context, ws []handoff.PageWrite) error {
	cp := make([]handoff.PageWrite, len(ws))
	total := 0
	for i := range ws {
		total += len(ws[i].Data)
	}
	buf := make([]byte, 0, total) // one allocation for the batch
	for i, w := range ws {
		cp[i] = w
		if w.Data != nil {
			start := len(buf)
			buf = append(buf, w.Data...)
			cp[i].Data = buf[start:len(buf):len(buf)]
		}
	}
	return c.d.Write(ctx, cp)
}

func (c decode) Commit(ctx context.Context, m *handoff.Commit) error {
	cp := *m
	cp.Digest = append([]byte(nil), m.Digest...)
	if m.Digest == nil {
		cp.Digest = nil
	}
	if m.Timing != nil {
		t := *m.Timing
		cp.Timing = &t
	}
	return c.d.Commit(ctx, &cp)
}

func (c decode) Abort(ctx context.Context, a *handoff.Abort) error {
	cp := *a
	return c.d.Abort(ctx, &cp)
}

func (c decode) Drained(ctx context.Context, id kv.ID) error { return c.d.Drained(ctx, id) }

func (c decode) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	return c.d.Stream(ctx, id, p) // tokens are values; nothing to copy
}

func (c decode) Cancel(ctx context.Context, id kv.ID) error { return c.d.Cancel(ctx, id) }

type prefill struct{ p handoff.Prefill }

func (c prefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	cp := *r
	cp.Tokens = append([]int32(nil), r.Tokens...)
	if r.Reservation != nil {
		cp.Reservation = CopyReservation(r.Reservation)
	}
	res, err := c.p.Prefill(ctx, &cp)
	if res == nil {
		return nil, err
	}
	out := *res
	return &out, err
}

// CopyReservation deep-copies a reservation.
func CopyReservation(r *handoff.Reservation) *handoff.Reservation {
	cp := *r
	cp.Pages = append([]kv.PageRef(nil), r.Pages...)
	return &cp
}
