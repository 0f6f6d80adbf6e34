package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
)

// Redialer is a role's handoff service (handoff.Decode and handoff.Prefill)
// over an authenticated TCP connection that is dialled again when it dies,
// so a restarted worker is used again without restarting its peers. A call
// that was in flight when the connection died still fails with
// handoff.ErrTransport (outcome unknown; the caller aborts), as the
// interface requires; only later calls use the new connection.
type Redialer struct {
	addr string
	cfg  tcp.Config
	log  *slog.Logger
	mu   sync.Mutex
	c    *tcp.Client
}

var (
	_ handoff.Decode  = (*Redialer)(nil)
	_ handoff.Prefill = (*Redialer)(nil)
)

// redialTimeout bounds one dial made on behalf of a call.
const redialTimeout = 5 * time.Second

// NewRedialer connects to addr, retrying until ctx ends (roles may start
// in any order).
func NewRedialer(ctx context.Context, addr string, cfg tcp.Config, log *slog.Logger) (*Redialer, error) {
	c, err := DialRetry(ctx, addr, cfg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Redialer{addr: addr, cfg: cfg, log: log, c: c}, nil
}

// Close closes the current connection.
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

func (r *Redialer) client(ctx context.Context) (*tcp.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil && r.c.Err() == nil {
		return r.c, nil
	}
	if r.c != nil {
		r.log.Warn("connection to a worker lost; dialling again", "addr", r.addr, "err", r.c.Err())
		r.c.Close()
		r.c = nil
	}
	dctx, cancel := context.WithTimeout(ctx, redialTimeout)
	defer cancel()
	c, err := tcp.Dial(dctx, r.addr, r.cfg)
	if err != nil {
		return nil, err
	}
	r.log.Info("connection to a worker re-established", "addr", r.addr)
	r.c = c
	return c, nil
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

func (r *Redialer) Abort(ctx context.Context, m *handoff.Abort) error {
	c, err := r.client(ctx)
	if err != nil {
		return err
	}
	return c.Abort(ctx, m)
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
