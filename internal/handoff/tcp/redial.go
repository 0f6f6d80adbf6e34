package tcp

import (
	"context"
	"sync"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// Redialer is a Client that dials on first use and again after its
// connection died, so a restarted peer is reached without rebuilding the
// caller. It never retries a call: a call on a connection that died returns
// ErrTransport (outcome unknown) and the caller decides (normally: Abort,
// which goes out on a fresh connection).
type Redialer struct {
	addr string
	cfg  Config
	mu   sync.Mutex
	c    *Client
}

// NewRedialer returns a Redialer for addr; nothing is dialed yet.
func NewRedialer(addr string, cfg Config) *Redialer { return &Redialer{addr: addr, cfg: cfg} }

func (r *Redialer) client(ctx context.Context) (*Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil && r.c.Err() == nil {
		return r.c, nil
	}
	if r.c != nil {
		r.c.Close()
		r.c = nil
	}
	c, err := Dial(ctx, r.addr, r.cfg)
	if err != nil {
		return nil, err
	}
	r.c = c
	return c, nil
}

// Close closes the current connection, if any.
func (r *Redialer) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c == nil {
		return nil
	}
	err := r.c.Close()
	r.c = nil
	return err
}

func (r *Redialer) Reserve(ctx context.Context, m *handoff.Reserve) (*handoff.Reservation, error) {
	c, err := r.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Reserve(ctx, m)
}

func (r *Redialer) Write(ctx context.Context, ws []handoff.PageWrite) error {
	c, err := r.client(ctx)
	if err != nil {
		return err
	}
	return c.Write(ctx, ws)
}

func (r *Redialer) Commit(ctx context.Context, m *handoff.Commit) error {
	c, err := r.client(ctx)
	if err != nil {
		return err
	}
	return c.Commit(ctx, m)
}

func (r *Redialer) Abort(ctx context.Context, a *handoff.Abort) error {
	c, err := r.client(ctx)
	if err != nil {
		return err
	}
	return c.Abort(ctx, a)
}

func (r *Redialer) Drained(ctx context.Context, id kv.ID) error {
	c, err := r.client(ctx)
	if err != nil {
		return err
	}
	return c.Drained(ctx, id)
}

func (r *Redialer) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	c, err := r.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Stream(ctx, id, p)
}

func (r *Redialer) Cancel(ctx context.Context, id kv.ID) error {
	c, err := r.client(ctx)
	if err != nil {
		return err
	}
	return c.Cancel(ctx, id)
}

func (r *Redialer) Prefill(ctx context.Context, m *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	c, err := r.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Prefill(ctx, m)
}

var (
	_ handoff.Decode  = (*Redialer)(nil)
	_ handoff.Prefill = (*Redialer)(nil)
)
