package node

import (
	"context"
	"sync"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// meter counts handoff bytes and latency as seen by the decode service's
// callers: latency runs from the router's Reserve to the prefill worker's
// accepted Commit; bytes are the page data of every Write call.
type meter struct {
	mu      sync.Mutex
	start   map[kv.ID]time.Time
	bytes   uint64
	count   uint64
	seconds float64
}

func newMeter() *meter { return &meter{start: map[kv.ID]time.Time{}} }

func (m *meter) snapshot() (bytes, count uint64, seconds float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes, m.count, m.seconds
}

// metered wraps a handoff.Decode; every method keeps the wrapped one's
// contract (it returns exactly when the wrapped call does).
type metered struct {
	handoff.Decode
	m *meter
}

func (d metered) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	t := time.Now()
	res, err := d.Decode.Reserve(ctx, r)
	if err == nil {
		d.m.mu.Lock()
		// Every handoff ends in Commit or Abort through these wrappers; the
		// cap only guards against a path that does not.
		if len(d.m.start) >= 1<<16 {
			clear(d.m.start)
		}
		d.m.start[r.Handoff] = t
		d.m.mu.Unlock()
	}
	return res, err
}

func (d metered) Write(ctx context.Context, ws []handoff.PageWrite) error {
	err := d.Decode.Write(ctx, ws)
	n := 0
	for i := range ws {
		n += ws[i].Len() // bytes still sealed (Open) count too
	}
	d.m.mu.Lock()
	d.m.bytes += uint64(n)
	d.m.mu.Unlock()
	return err
}

func (d metered) Commit(ctx context.Context, c *handoff.Commit) error {
	err := d.Decode.Commit(ctx, c)
	d.m.mu.Lock()
	if t, ok := d.m.start[c.Handoff]; ok {
		delete(d.m.start, c.Handoff)
		if err == nil {
			d.m.count++
			d.m.seconds += time.Since(t).Seconds()
		}
	}
	d.m.mu.Unlock()
	return err
}

func (d metered) Abort(ctx context.Context, a *handoff.Abort) error {
	err := d.Decode.Abort(ctx, a)
	d.m.mu.Lock()
	delete(d.m.start, a.Handoff)
	d.m.mu.Unlock()
	return err
}
